# Control: plain Python that behaves the same in both hosts.
print(sum(range(10)), "same everywhere")
