"""API responses written by orjson: the reviewer queue's payloads serialise several times faster."""

import orjson
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

# What orjson does not write itself (lazy translation strings, Decimal, numpy values, datetimes with
# DRF's trailing "Z") goes through DRF's own encoder, so responses read exactly as before.
_drf_default = JSONEncoder().default


class OrjsonRenderer(JSONRenderer):
    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data, default=_drf_default, option=orjson.OPT_PASSTHROUGH_DATETIME)
