# Unicode everywhere: normalisation, case folding, widths, surrogates, encodings, sorting.
import unicodedata

samples = ["café", "cafe\u0301", "Ｆｕｌｌｗｉｄｔｈ", "ǅemal", "straße", "İstanbul", "🇫🇷🏳️‍🌈👩‍👩‍👧", "עברית", "日本語テキスト", "\u200bzero"]
for s in samples:
    nfc = unicodedata.normalize("NFC", s)
    print(f"{s!r:<28} len={len(s):>2} nfc={len(nfc):>2} fold={s.casefold()!r} utf8={len(s.encode())}")
print("café" == "cafe\u0301", unicodedata.normalize("NFC", "cafe\u0301") == "café")
print([unicodedata.name(c, "?") for c in "é€🙂\u0301"])
print(unicodedata.category("Ä"), unicodedata.east_asian_width("日"), unicodedata.numeric("⅞"), unicodedata.decimal("٣"))
print(sorted(["éclair", "Eagle", "eagle", "zebra", "Äpfel"]), sorted(["éclair", "Eagle", "zebra"], key=str.casefold))
print("naïve".encode("latin-1"), "naïve".encode("ascii", "replace"), "naïve".encode("ascii", "xmlcharrefreplace"))
print(b"\xff\xfeh\x00i\x00".decode("utf-16"), b"caf\xe9".decode("utf-8", "replace"), "\ud83d".encode("utf-8", "surrogatepass"))
print("x\u0000y", "tab\tend", "🙂"[::-1], "ab🙂cd"[2], len("👩‍👩‍👧"))
print("Ⅻ".isnumeric(), "²".isdigit(), "٣".isdecimal(), "ß".upper(), "ﬁ".upper(), "Σίσυφος".lower())
print("\N{SNOWMAN} \N{GREEK SMALL LETTER ALPHA} \u00e9 \U0001F600")
"→ résumé ✓ 完了"
