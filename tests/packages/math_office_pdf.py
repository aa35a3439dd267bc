import sympy, mpmath
x = sympy.symbols("x")
print(sympy.integrate(x**2, x), sympy.factor(x**2 - 1), mpmath.mp.dps)
import io, openpyxl, et_xmlfile, xlsxwriter
buf = io.BytesIO()
wb = xlsxwriter.Workbook(buf)
ws = wb.add_worksheet()
ws.write(0, 0, "n"); ws.write(1, 0, 41); ws.write_formula(2, 0, "=A2+1", None, 42)
wb.close()
book = openpyxl.load_workbook(io.BytesIO(buf.getvalue()))
print([c.value for c in book.active["A"]])
import pypdf
w = pypdf.PdfWriter(); w.add_blank_page(200, 100); out = io.BytesIO(); w.write(out)
print(len(pypdf.PdfReader(io.BytesIO(out.getvalue())).pages), pypdf.PdfReader(io.BytesIO(out.getvalue())).pages[0].mediabox.width)
