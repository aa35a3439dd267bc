# Checksums and encodings: hashlib, hmac, base64, binascii, zlib, gzip, struct.
import base64
import binascii
import gzip
import hashlib
import hmac
import struct
import zlib

payload = "Ünïcödé payload for hashing 🚀".encode("utf-8") * 3
print(hashlib.sha256(payload).hexdigest())
print(hashlib.md5(payload).hexdigest(), hashlib.sha1(payload).hexdigest())
print(hashlib.blake2b(payload, digest_size=16).hexdigest(), hashlib.sha3_256(b"").hexdigest())
print(hmac.new(b"secret", payload, "sha256").hexdigest())
print(hmac.compare_digest(b"abc", b"abc"), sorted(hashlib.algorithms_guaranteed)[:4])
print(base64.b64encode(payload[:20]), base64.urlsafe_b64encode(b"\xfb\xff\xfe"), base64.b32encode(b"hi"))
print(base64.b64decode("SGVsbG8sIHdvcmxkIQ=="), binascii.hexlify(b"\x00\x10\xff", "-"))
print(zlib.crc32(payload), zlib.adler32(payload), len(zlib.compress(payload, 9)))
print(zlib.decompress(zlib.compress(payload)) == payload, len(gzip.decompress(gzip.compress(payload, mtime=0))))
print(struct.pack("<IhQ?", 1, -2, 2**63, True), struct.unpack(">HHf", b"\x00\x01\x00\x02\x40\x49\x0f\xdb"))
print(struct.calcsize("@iqc"), hashlib.file_digest(__import__("io").BytesIO(payload), "sha256").hexdigest()[:32])
{"sha256": hashlib.sha256(b"abc").hexdigest()}
