#!/usr/bin/env python3
"""The person's browser in the OAuth tests (run as $BROWSER with the sign-in address last): opens
the address and follows its redirects, as a browser would. The conformance suite's authorization
server approves at once and redirects to mcp-code-mode's loopback listener with the code."""
import sys
import urllib.request

with urllib.request.urlopen(sys.argv[-1], timeout=30) as page:
    page.read()
