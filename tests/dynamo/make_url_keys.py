#!/usr/bin/env python3
"""The cache key ai-dynamo 1.6.1 gives a URL, computed by Dynamo's own function.

    python3 tests/dynamo/make_url_keys.py WHEEL > crates/scope/tests/dynamo_url_keys.tsv
    python3 tests/dynamo/make_url_keys.py WHEEL --stdin   < urls   (one escaped URL a line)

WHEEL is ``ai_dynamo-1.6.1-py3-none-any.whl`` (``pip download --no-deps ai-dynamo==1.6.1``;
``cargo xtask test`` puts it in target/dynamo-wheel). Dynamo keys an http(s) URL by
``_normalize_http_url_key(validate_media_url(url))``, and ``validate_media_url`` returns such a
URL unchanged, so the key is ``_normalize_http_url_key(url)``. That function is taken from
``dynamo/common/multimodal/image_loader.py`` in the wheel, alone: its definition is compiled as
written, bound to ``urllib.parse.urlsplit`` as the module's own import binds it; nothing else of
Dynamo is imported (the module's other imports need torch and Dynamo's compiled runtime).

Output: tab-separated ``name``, ``url``, ``key`` (``--stdin``: ``url``, ``key``). Where Python
raises ``ValueError`` (Dynamo then refuses the URL before keying it), the key is ``!`` and the
message. Fields escape backslash, tab, CR, LF as ``\\\\``, ``\\t``, ``\\r``, ``\\n``, other
control characters and a field's trailing space as ``\\xHH``; anything else is UTF-8 as is.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import urllib.parse
import zipfile
from pathlib import Path

WHEEL_NAME = "ai_dynamo-1.6.1-py3-none-any.whl"
MODULE = "dynamo/common/multimodal/image_loader.py"
FUNCTION = "_normalize_http_url_key"

# (name, url): every kind of URL a worker may be given, reachable by Dynamo's key or not.
CASES = [
    ("design-vector", "https://example.com/img.png"),
    ("upper-scheme", "HTTPS://example.com/img.png"),
    ("mixed-scheme-http", "HtTp://example.com/a.png"),
    ("upper-host", "https://Example.COM/a.png"),
    ("upper-host-and-scheme", "HTTPS://EXAMPLE.COM/A.PNG"),
    ("fragment", "https://example.com/a.png#frag"),
    ("fragment-holding-query", "https://example.com/a.png#Frag?x=1"),
    ("query-and-fragment", "https://example.com/a.png?x=1#frag"),
    ("empty-query", "https://example.com/a.png?"),
    ("empty-fragment", "https://example.com/a.png#"),
    ("empty-query-and-fragment", "https://example.com/a.png?#"),
    ("query-then-empty-fragment", "https://example.com/a.png?x=1#"),
    ("query-of-question-marks", "https://example.com/a.png??x"),
    ("query-case-kept", "https://example.com/a.png?Sig=AbC&X-Amz-Date=20260101T000000Z"),
    ("path-case-kept", "https://example.com/Dir/A.PNG"),
    ("port", "https://example.com:8443/a.png"),
    ("upper-host-port", "https://EXAMPLE.com:8443/a.png"),
    ("port-80-kept", "http://example.com:80/a.png"),
    ("port-443-kept", "https://Example.com:443/a.png"),
    ("empty-port", "https://Example.com:/a.png"),
    ("ipv4", "http://127.0.0.1:8080/a.png"),
    ("ipv6", "https://[2001:DB8::1]/a.png"),
    ("ipv6-port", "https://[2001:DB8::A]:8443/a.png"),
    ("ipv6-zone", "http://[FE80::1%25Eth0]/a.png"),
    ("ipv6-zone-port", "http://[FE80::1%25Eth0]:8080/a.png"),
    ("ipv6-zone-unencoded", "http://[FE80::1%Eth0]/a.png"),
    ("ipv6-userinfo", "http://User@[FE80::AB%25Eth0]:1/a.png"),
    ("ipvfuture", "http://[v1.FE80::A+En1]/a.png"),
    ("percent-encoding-kept", "https://example.com/a%2Fb%20C.png?q=%41%3d"),
    ("percent-lowercase-hex-kept", "https://example.com/a%2fb.png"),
    ("percent-in-host", "https://EX%41MPLE.com/a.png"),
    ("userinfo", "https://User:PaSS@Example.com/a.png"),
    ("userinfo-with-at", "https://U:P@SS@Example.COM/a.png"),
    ("dot-segments-kept", "https://example.com/a/../b/./c.png"),
    ("leading-dot-dot", "https://example.com/../a.png"),
    ("empty-path", "https://Example.com"),
    ("empty-path-query", "https://Example.com?X=1"),
    ("empty-path-fragment", "https://Example.com#top"),
    ("empty-path-trailing-query-fragment", "https://Example.com?#"),
    ("root-path", "https://Example.com/"),
    ("double-slashes", "https://example.com//a//b.png"),
    ("trailing-dot-host", "https://Example.com./a.png"),
    ("non-ascii-host", "https://BÜCHER.de/a.png"),
    ("punycode-host", "https://XN--BCHER-KVA.de/a.png"),
    ("final-sigma-host", "https://ΣΊΣΥΦΟΣ.gr/a.png"),
    ("dotted-capital-i-host", "https://İSTANBUL.com/a.png"),
    ("kelvin-sign-host", "https://\u212aELVIN.com/a.png"),
    ("non-ascii-path", "https://example.com/Ärger.png?Ü=1"),
    ("leading-space", "  https://Example.com/a.png"),
    ("leading-control", "\x01\x1f https://Example.com/a.png"),
    ("tab-and-newlines", "ht\ttps://Exa\nmple.com/a\r.png"),
    ("trailing-space-kept", "https://Example.com/a.png "),
    ("space-in-path", "https://example.com/a b.png"),
    ("backslash", "https://Example.com\\A.png"),
    ("backslash-in-path", "https://Example.com/A\\B.png"),
    ("delete-char", "https://Example.com/a\x7f.png"),
    ("scheme-relative", "//Example.com/a.png#f"),
    ("other-scheme", "FTP://Example.com/a.png#f"),
    ("no-host", "https:///a.png"),
    ("no-slashes", "HTTPS:a.png"),
    ("scheme-only", "https://"),
    ("no-scheme", "Example.com/a.png#f"),
    ("digit-first-scheme", "1https://Example.com/a.png"),
    ("empty", ""),
    ("unclosed-bracket", "https://[::1/a.png"),
    ("ipv4-in-brackets", "https://[127.0.0.1]/a.png"),
    ("nfkc-slash-in-host", "https://a\u2100b.com/a.png"),
]


def escape(s: str) -> str:
    out = []
    for c in s:
        if c == "\\":
            out.append("\\\\")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif c == "\n":
            out.append("\\n")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    if s.endswith(" "):  # a trailing space would not survive editors
        out[-1] = "\\x20"
    return "".join(out)


def unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "x":
            out.append(chr(int(s[i + 2 : i + 4], 16)))
            i += 4
        else:
            out.append({"\\": "\\", "t": "\t", "r": "\r", "n": "\n"}[nxt])
            i += 2
    return "".join(out)


def dynamo_function(wheel: Path):
    """Dynamo's ``_normalize_http_url_key``, compiled from the wheel's own source."""
    if wheel.name != WHEEL_NAME:
        sys.exit(f"expected {WHEEL_NAME}, got {wheel.name}")
    with zipfile.ZipFile(wheel) as z:
        source = z.read(MODULE)
    tree = ast.parse(source)
    imports_urlsplit = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "urllib.parse"
        and any(a.name == "urlsplit" and a.asname is None for a in n.names)
        for n in tree.body
    )
    if not imports_urlsplit:
        sys.exit(f"{MODULE} no longer has `from urllib.parse import urlsplit`")
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION]
    if len(defs) != 1:
        sys.exit(f"{MODULE} has {len(defs)} definitions of {FUNCTION}")
    namespace = {"urlsplit": urllib.parse.urlsplit}
    code = compile(ast.Module(body=defs, type_ignores=[]), f"{wheel.name}/{MODULE}", "exec")
    exec(code, namespace)  # only the function definition: it runs nothing
    return namespace[FUNCTION], hashlib.sha256(source).hexdigest()


def key_of(normalize, url: str) -> str:
    try:
        return normalize(url)
    except ValueError as e:  # a NameError would mean the function needs more than urlsplit
        return f"!{e}"


def main() -> None:
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--stdin"):
        sys.exit(__doc__)
    normalize, digest = dynamo_function(Path(sys.argv[1]))
    out = sys.stdout
    if len(sys.argv) == 3:
        for line in sys.stdin.read().split("\n")[:-1]:
            url = unescape(line)
            out.write(f"{escape(url)}\t{escape(key_of(normalize, url))}\n")
        return
    out.write(
        f"# Generated by tests/dynamo/make_url_keys.py from {WHEEL_NAME}\n"
        f"# ({MODULE} sha256 {digest}; Python {sys.version.split()[0]}); do not edit.\n"
        "# name\turl\tkey (`!` + message: Python raised, Dynamo refuses the URL unkeyed)\n"
    )
    names = set()
    for name, url in CASES:
        assert name not in names, name
        names.add(name)
        out.write(f"{name}\t{escape(url)}\t{escape(key_of(normalize, url))}\n")


if __name__ == "__main__":
    main()
