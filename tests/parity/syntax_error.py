# A script that does not compile: the error points into the script's own source.
data = [1, 2, 3]
for x in data
    print(x)
