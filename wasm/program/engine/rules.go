package engine

// Rules are the language rules, for the run_program tool's description
// (followed there by one stub per tool). Kept under 900 bytes: it is paid
// for in every request's tokens.
const Rules = `Programs are Starlark (Python-like). Rules:
- Call tools as module.function(name=value, ...): keyword arguments only; a "quoted" name as **{"max-bytes": 1}. call("tool_name", name=value) calls one by name.
- A failed call (denied, error, limit) fails the program with its line. To handle it: r = attempt(fs.read_file, path=p) gives r.ok, r.value, r.error, r.outcome.
- parallel(f1, f2, ...) or parallel([lambda p=p: fs.stat(path=p) for p in paths]) runs functions at once; results in argument order.
- Return a value: define main() and return it, or set result = ...; it comes back as JSON, with print(...) output.
- No try/except, imports, classes, f-strings, is, x ** y or recursion: use "{}".format(x) or "%s" % x; == None; json.encode/decode, struct(...), sum, sorted(key=...) are there.
- Limits: steps in all and between calls, calls, data, result and print size; return only what you need.`
