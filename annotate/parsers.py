"""The API's JSON parser: DRF's, refusing a body nested too deep in one line (400) rather than failing
on it (annotate/limits.py: MAX_JSON_DEPTH)."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from annotate import limits


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # Python's reader gives up long before the body's end
            too_deep = True
        else:
            too_deep = limits.json_too_deep(data)
        if too_deep:
            raise ParseError(f"the JSON body {limits.JSON_TOO_DEEP}; send a flatter one")
        return data
