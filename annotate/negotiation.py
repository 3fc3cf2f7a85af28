"""The API speaks JSON only, so choosing a renderer needs no Accept-header parsing on every request."""

from rest_framework.negotiation import BaseContentNegotiation


class JsonOnlyNegotiation(BaseContentNegotiation):
    def select_parser(self, request, parsers):
        content_type = request.content_type or ""
        return next(
            (parser for parser in parsers if parser.media_type == "*/*" or content_type.startswith(parser.media_type)),
            None,
        )

    def select_renderer(self, request, renderers, format_suffix=None):
        renderer = renderers[0]
        return renderer, renderer.media_type
