"""The API's JSON parser, used by every JSON endpoint: DRF's, reading through the one bounded JSON reader
(training/json_input.py), so that a body nested too deep or holding a number too long for Python's reader is the
same one-line 400 as any other bad body rather than a 500."""

import codecs

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils import json as drf_json

from training.json_input import JsonRefused, read_json


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = parsers.get_encoding(parser_context or {})
        parse_constant = drf_json.strict_constant if self.strict else None
        try:
            return read_json(codecs.getreader(encoding)(stream).read(), parse_constant=parse_constant)
        except JsonRefused as refused:
            raise ParseError(f"the JSON body {refused.reason}; {refused.fix}") from None
        except ValueError as exc:  # bad syntax, NaN or Infinity, bytes that are not the body's encoding
            raise ParseError(f"JSON parse error - {exc}") from None
