//! Conformance with Go's `text/template` and sprig, for the data CAPI hands a patch
//! template: JSON decoded into `map[string]interface{}` (numbers are float64).
//!
//! Each table names where its expectations come from. Go's exec cases are those of
//! `src/text/template/exec_test.go` (`execTests`, `TestJSEscaping`, the comparison
//! and `break`/`continue` tests) restated over map data, plus `src/fmt`'s documented
//! verbs; sprig's are from its function documentation (`docs/*.md`) and its test
//! tables (`strings_test.go`, `list_test.go`, `dict_test.go`, `numeric_test.go`,
//! `semver_test.go`, `regex_test.go`, `crypto_test.go`, `defaults_test.go`).

use serde_json::{json, Value};
use stackhook_gotmpl::Template;

/// The fields of exec_test.go's `tVal` that these cases use, as JSON.
fn data() -> Value {
    json!({
        "I": 17, "X": "x", "U": {"V": "v"},
        "SI": [3, 4, 5], "SIEmpty": [],
        "MSI": {"one": 1, "two": 2, "three": 3}, "MSIone": {"one": 1}, "MSIEmpty": {},
        "Big": 1000000, "Half": 1.5, "Str": "It'd be nice.", "Empty": "",
        "T": true, "F": false, "Nil": null,
    })
}

enum Want {
    Out(&'static str),
    /// An error whose text contains this.
    Err(&'static str),
}
use Want::{Err, Out};

fn check(table: &[(&str, &str, Want)]) {
    let data = data();
    let mut failures = Vec::new();
    for (name, src, want) in table {
        let got = Template::parse("tpl", src).and_then(|t| t.render(&data));
        match (want, &got) {
            (Out(w), Ok(g)) if g == w => {}
            (Err(w), std::result::Result::Err(e)) if e.to_string().contains(w) => {}
            _ => failures.push(format!(
                "{name}: {src:?}\n    want {}\n    got  {got:?}",
                match want {
                    Out(w) => format!("output {w:?}"),
                    Err(w) => format!("error containing {w:?}"),
                }
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ from Go:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// golang/go src/text/template/exec_test.go, `execTests`: actions, variables, if/else,
/// with, range, index, len, slice, logic and printing, restated over map data.
#[test]
fn go_exec_actions_and_variables() {
    check(&[
        ("empty", "", Out("")),
        ("text", "some text", Out("some text")),
        ("nil action", "{{nil}}", Err("nil is not a command")),
        ("field on map", "{{.X}}", Out("x")),
        ("nested field", "{{.U.V}}", Out("v")),
        ("map .one", "{{.MSI.one}}", Out("1")),
        ("missing map key", "{{.MSI.nosuch}}", Out("<no value>")),
        ("dot int", "<{{.I}}>", Out("<17>")),
        ("dot float", "<{{.Half}}>", Out("<1.5>")),
        ("dot bool", "<{{.T}}>", Out("<true>")),
        ("$ field", "{{$.I}}", Out("17")),
        ("declare in action", "{{$x := $.U.V}}{{$x}}", Out("v")),
        (
            "simple assignment",
            "{{$x := 2}}{{if true}}{{$x = 3}}{{end}}{{$x}}",
            Out("3"),
        ),
        (
            "nested assignment changes the last declaration",
            "{{$x := 1}}{{if true}}{{$x := 2}}{{if true}}{{$x = 3}}{{end}}{{end}}{{$x}}",
            Out("1"),
        ),
        (
            "undefined variable",
            "{{$x}}",
            Err("undefined variable \"$x\""),
        ),
        ("parenthesized", "{{(1)}}", Out("1")),
        ("pipeline", "{{\"output\" | printf \"%s\"}}", Out("output")),
        (
            "pipeline appends last",
            "{{\"x\" | printf \"%s %s\" \"y\"}}",
            Out("y x"),
        ),
        // fmt.Sprint puts no space next to a string operand.
        ("nested call", "{{print (printf \"%d\" 1) 2}}", Out("12")),
        ("comment", "a{{/* a comment */}}b", Out("ab")),
        ("trim both", "a  {{- 3 -}}  b", Out("a3b")),
        ("trim comment", "a {{- /* c */ -}} b", Out("ab")),
    ]);
}

/// exec_test.go `execTests`: if, else if, with and their truth rules.
#[test]
fn go_exec_if_and_with() {
    check(&[
        ("if true", "{{if true}}TRUE{{end}}", Out("TRUE")),
        (
            "if false",
            "{{if false}}TRUE{{else}}FALSE{{end}}",
            Out("FALSE"),
        ),
        (
            "if 1",
            "{{if 1}}NON-ZERO{{else}}ZERO{{end}}",
            Out("NON-ZERO"),
        ),
        ("if 0", "{{if 0}}NON-ZERO{{else}}ZERO{{end}}", Out("ZERO")),
        (
            "if 1.5",
            "{{if 1.5}}NON-ZERO{{else}}ZERO{{end}}",
            Out("NON-ZERO"),
        ),
        (
            "if 0.0",
            "{{if .0}}NON-ZERO{{else}}ZERO{{end}}",
            Out("ZERO"),
        ),
        (
            "if emptystring",
            "{{if \"\"}}NON-EMPTY{{else}}EMPTY{{end}}",
            Out("EMPTY"),
        ),
        (
            "if string",
            "{{if \"notempty\"}}NON-EMPTY{{else}}EMPTY{{end}}",
            Out("NON-EMPTY"),
        ),
        (
            "if emptyslice",
            "{{if .SIEmpty}}NON-EMPTY{{else}}EMPTY{{end}}",
            Out("EMPTY"),
        ),
        (
            "if slice",
            "{{if .SI}}NON-EMPTY{{else}}EMPTY{{end}}",
            Out("NON-EMPTY"),
        ),
        (
            "if emptymap",
            "{{if .MSIEmpty}}NON-EMPTY{{else}}EMPTY{{end}}",
            Out("EMPTY"),
        ),
        (
            "if map",
            "{{if .MSI}}NON-EMPTY{{else}}EMPTY{{end}}",
            Out("NON-EMPTY"),
        ),
        (
            "if nil field",
            "{{if .Nil}}NON-NIL{{else}}NIL{{end}}",
            Out("NIL"),
        ),
        (
            "if else if",
            "{{if false}}FALSE{{else if true}}TRUE{{end}}",
            Out("TRUE"),
        ),
        (
            "if else chain",
            "{{if eq 1 3}}1{{else if eq 2 3}}2{{else if eq 3 3}}3{{end}}",
            Out("3"),
        ),
        ("with true", "{{with true}}{{.}}{{end}}", Out("true")),
        (
            "with false",
            "{{with false}}{{.}}{{else}}FALSE{{end}}",
            Out("FALSE"),
        ),
        ("with $x int", "{{with $x := .I}}{{$x}}{{end}}", Out("17")),
        (
            "with empty string",
            "{{with \"\"}}{{.}}{{else}}EMPTY{{end}}",
            Out("EMPTY"),
        ),
        ("with map", "{{with .MSIone}}{{.one}}{{end}}", Out("1")),
    ]);
}

/// exec_test.go `execTests` (range cases) and `TestBreak`/`TestContinue`-style loops.
#[test]
fn go_exec_range() {
    check(&[
        (
            "range slice",
            "{{range .SI}}-{{.}}-{{end}}",
            Out("-3--4--5-"),
        ),
        (
            "range empty else",
            "{{range .SIEmpty}}-{{.}}-{{else}}EMPTY{{end}}",
            Out("EMPTY"),
        ),
        (
            "range $x",
            "{{range $x := .SI}}<{{$x}}>{{end}}",
            Out("<3><4><5>"),
        ),
        (
            "range $x $y",
            "{{range $x, $y := .SI}}<{{$x}}={{$y}}>{{end}}",
            Out("<0=3><1=4><2=5>"),
        ),
        // Maps are visited in sorted key order.
        (
            "range map",
            "{{range .MSI}}-{{.}}-{{end}}",
            Out("-1--3--2-"),
        ),
        (
            "range $k $v map",
            "{{range $x, $y := .MSIone}}<{{$x}}={{$y}}>{{end}}",
            Out("<one=1>"),
        ),
        (
            "range empty map else",
            "{{range .MSIEmpty}}-{{.}}-{{else}}EMPTY{{end}}",
            Out("EMPTY"),
        ),
        (
            "range break",
            "{{range .SI}}{{if ge . 4.0}}{{break}}{{end}}-{{.}}-{{end}}",
            Out("-3-"),
        ),
        (
            "range continue",
            "{{range .SI}}{{if eq . 4.0}}{{continue}}{{end}}-{{.}}-{{end}}",
            Out("-3--5-"),
        ),
        ("$ inside range", "{{range .SI}}{{$.X}}{{end}}", Out("xxx")),
    ]);
}

/// exec_test.go `execTests` for the builtins index, len, slice, and, or, not.
#[test]
fn go_exec_builtins() {
    check(&[
        ("index slice", "{{index .SI 1}}", Out("4")),
        ("index map", "{{index .MSI \"two\"}}", Out("2")),
        (
            "index map missing",
            "{{index .MSI \"XXX\"}}",
            Out("<no value>"),
        ),
        (
            "index out of range",
            "{{index .SI 10}}",
            Err("index out of range: 10"),
        ),
        ("len slice", "{{len .SI}}", Out("3")),
        ("len map", "{{len .MSI}}", Out("3")),
        ("len string", "{{len \"abc\"}}", Out("3")),
        ("len int", "{{len 3}}", Err("len of type int")),
        // sprig's `slice` replaces the builtin in CAPI's function map, and takes
        // lists only (sprig list.go, mustSlice).
        ("slice slice", "{{slice .SI 1 2}}", Out("[4]")),
        (
            "slice string",
            "{{slice \"abc\" 1}}",
            Err("list should be type of slice or array but string"),
        ),
        ("not", "{{not true}} {{not false}}", Out("false true")),
        (
            "and",
            "{{and false 0}} {{and 1 0}} {{and 0 true}} {{and 1 1}}",
            Out("false 0 0 1"),
        ),
        (
            "or",
            "{{or 0 0}} {{or 1 0}} {{or 0 true}} {{or 1 1}}",
            Out("0 1 true 1"),
        ),
        (
            "and short-circuits",
            "{{and false .MSI.nosuch.deeper}}",
            Out("false"),
        ),
        (
            "or short-circuits",
            "{{or true .MSI.nosuch.deeper}}",
            Out("true"),
        ),
        (
            "html",
            "{{html \"<script>alert(\\\"XSS\\\");</script>\"}}",
            Out("&lt;script&gt;alert(&#34;XSS&#34;);&lt;/script&gt;"),
        ),
        ("js", "{{js .Str}}", Out("It\\'d be nice.")),
        (
            "urlquery",
            "{{\"http://www.example.org/\"|urlquery}}",
            Out("http%3A%2F%2Fwww.example.org%2F"),
        ),
    ]);
}

/// exec_test.go `cmpTests`: eq, ne, lt, le, gt, ge, including Go's refusals. JSON
/// numbers are float64, so comparing one with an integer constant is an error in Go.
#[test]
fn go_exec_comparisons() {
    check(&[
        ("eq 1 1", "{{eq 1 1}}", Out("true")),
        ("eq strings", "{{eq \"xy\" \"xy\"}}", Out("true")),
        ("eq any of", "{{eq 3 4 5 3}}", Out("true")),
        ("eq none of", "{{eq 3 4 5 6}}", Out("false")),
        ("ne", "{{ne 1 2}}", Out("true")),
        (
            "lt",
            "{{lt 1 2}} {{lt 2 1}} {{lt 1 1}}",
            Out("true false false"),
        ),
        (
            "le",
            "{{le 1 2}} {{le 2 2}} {{le 3 2}}",
            Out("true true false"),
        ),
        ("gt", "{{gt 1 2}} {{gt 2 1}}", Out("false true")),
        ("ge", "{{ge 1 2}} {{ge 2 2}}", Out("false true")),
        ("lt strings", "{{lt \"a\" \"b\"}}", Out("true")),
        ("eq float data", "{{eq .I 17.0}}", Out("true")),
        (
            "eq float data with int",
            "{{eq .I 17}}",
            Err("incompatible types for comparison"),
        ),
        (
            "eq mixed kinds",
            "{{eq 1 \"a\"}}",
            Err("incompatible types for comparison"),
        ),
        (
            "lt bools",
            "{{lt true false}}",
            Err("invalid type for comparison"),
        ),
    ]);
}

/// exec_test.go (`print`, `println`, `printf` cases) and src/fmt/doc.go's verbs.
#[test]
fn go_print_and_fmt() {
    check(&[
        ("print", "{{print \"hello, print\"}}", Out("hello, print")),
        ("print numbers", "{{print 1 2 3}}", Out("1 2 3")),
        // Print adds spaces only between operands when neither is a string.
        ("print mixed", "{{print \"a\" 1 2 \"b\"}}", Out("a1 2b")),
        ("print nil", "{{print nil}}", Out("<nil>")),
        ("println", "{{println 1 2 3}}", Out("1 2 3\n")),
        ("printf int", "{{printf \"%04x\" 127}}", Out("007f")),
        ("printf float", "{{printf \"%g\" 3.5}}", Out("3.5")),
        (
            "printf precision",
            "{{printf \"%.2f\" 3.14159}}",
            Out("3.14"),
        ),
        (
            "printf widths",
            "{{printf \"%5d|%-5d|\" 42 42}}",
            Out("   42|42   |"),
        ),
        ("printf string", "{{printf \"%s\" \"hello\"}}", Out("hello")),
        ("printf quoted", "{{printf \"%q\" \"x\"}}", Out("\"x\"")),
        ("printf hex string", "{{printf \"%x\" \"hi\"}}", Out("6869")),
        ("printf bool", "{{printf \"%t\" true}}", Out("true")),
        ("printf percent", "{{printf \"%d%%\" 50}}", Out("50%")),
        (
            "printf var",
            "{{with $x := 17}}{{printf \"%d\" $x}}{{end}}",
            Out("17"),
        ),
        ("printf slice", "{{printf \"%v\" .SI}}", Out("[3 4 5]")),
        ("printf map", "{{printf \"%v\" .MSIone}}", Out("map[one:1]")),
        ("missing operand", "{{printf \"%d\"}}", Out("%!d(MISSING)")),
        (
            "wrong type",
            "{{printf \"%d\" \"x\"}}",
            Out("%!d(string=x)"),
        ),
        (
            "extra operand",
            "{{printf \"%s\" 1 2}}",
            Out("%!s(int=1)%!(EXTRA int=2)"),
        ),
        // float64 data prints with %v's shortest form: large values in exponent form.
        ("large float", "{{.Big}}", Out("1e+06")),
        (
            "float formatted",
            "{{printf \"%.0f\" .Big}}",
            Out("1000000"),
        ),
    ]);
}

/// src/text/template/parse/parse_test.go (`parseTests`, `errorTests`) and CAPI's
/// hermetic function map: what does not parse, with Go's wording.
#[test]
fn go_parse_errors() {
    check(&[
        ("unclosed action", "{{print 1", Err("unclosed action")),
        ("unexpected end", "{{end}}", Err("unexpected {{end}}")),
        ("missing end", "{{if true}}x", Err("unexpected EOF")),
        (
            "undefined function",
            "{{nosuchfunc 1}}",
            Err("function \"nosuchfunc\" not defined"),
        ),
        // CAPI's map is sprig's hermetic one: no environment, clock or randomness.
        (
            "env is not hermetic",
            "{{env \"HOME\"}}",
            Err("function \"env\" not defined"),
        ),
        (
            "now is not hermetic",
            "{{now}}",
            Err("function \"now\" not defined"),
        ),
        (
            "randAlpha is not hermetic",
            "{{randAlpha 5}}",
            Err("function \"randAlpha\" not defined"),
        ),
        (
            "uuid is not hermetic",
            "{{uuidv4}}",
            Err("function \"uuidv4\" not defined"),
        ),
        (
            "break outside range",
            "{{break}}",
            Err("{{break}} outside {{range}}"),
        ),
    ]);
}

/// Masterminds/sprig strings_test.go and docs/strings.md.
#[test]
fn sprig_strings() {
    check(&[
        ("upper", "{{ upper \"hello\" }}", Out("HELLO")),
        ("lower", "{{ lower \"HELLO\" }}", Out("hello")),
        ("title", "{{ title \"hello world\" }}", Out("Hello World")),
        ("trim", "{{ trim \"   hello    \" }}", Out("hello")),
        ("trimAll", "{{ trimAll \"$\" \"$5.00\" }}", Out("5.00")),
        (
            "trimPrefix",
            "{{ trimPrefix \"-\" \"-hello\" }}",
            Out("hello"),
        ),
        (
            "trimSuffix",
            "{{ trimSuffix \"-\" \"hello-\" }}",
            Out("hello"),
        ),
        ("repeat", "{{ repeat 3 \"hello\" }}", Out("hellohellohello")),
        ("substr", "{{ substr 0 5 \"hello world\" }}", Out("hello")),
        ("trunc", "{{ trunc 5 \"hello world\" }}", Out("hello")),
        (
            "trunc negative",
            "{{ trunc -5 \"hello world\" }}",
            Out("world"),
        ),
        ("abbrev", "{{ abbrev 5 \"hello world\" }}", Out("he...")),
        ("contains", "{{ contains \"cat\" \"catch\" }}", Out("true")),
        (
            "hasPrefix",
            "{{ hasPrefix \"cat\" \"catch\" }}",
            Out("true"),
        ),
        (
            "hasSuffix",
            "{{ hasSuffix \"cat\" \"catch\" }}",
            Out("false"),
        ),
        ("quote", "{{ quote \"hi\" }}", Out("\"hi\"")),
        ("squote", "{{ squote \"hi\" }}", Out("'hi'")),
        (
            "cat",
            "{{ cat \"hello\" \"beautiful\" \"world\" }}",
            Out("hello beautiful world"),
        ),
        ("indent", "{{ indent 4 \"a\\nb\" }}", Out("    a\n    b")),
        ("nindent", "{{ nindent 2 \"a\" }}", Out("\n  a")),
        (
            "replace",
            "{{ replace \" \" \"-\" \"I Am Henry VIII\" }}",
            Out("I-Am-Henry-VIII"),
        ),
        (
            "plural",
            "{{ plural \"one anchovy\" \"many anchovies\" 2 }}",
            Out("many anchovies"),
        ),
        (
            "snakecase",
            "{{ snakecase \"FirstName\" }}",
            Out("first_name"),
        ),
        (
            "camelcase",
            "{{ camelcase \"http_server\" }}",
            Out("HttpServer"),
        ),
        (
            "kebabcase",
            "{{ kebabcase \"FirstName\" }}",
            Out("first-name"),
        ),
        ("join", "{{ list 1 2 3 | join \",\" }}", Out("1,2,3")),
        (
            "splitList",
            "{{ splitList \"$\" \"foo$bar$baz\" }}",
            Out("[foo bar baz]"),
        ),
        ("toString", "{{ toString 1 }}", Out("1")),
        ("b64enc", "{{ b64enc \"hello\" }}", Out("aGVsbG8=")),
        ("b64dec", "{{ b64dec \"aGVsbG8=\" }}", Out("hello")),
        ("b32enc", "{{ b32enc \"hello\" }}", Out("NBSWY3DP")),
        (
            "sha256sum",
            "{{ sha256sum \"hello\" }}",
            Out("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
        ),
        (
            "sha1sum",
            "{{ sha1sum \"abc\" }}",
            Out("a9993e364706816aba3e25717850c26c9cd0d89d"),
        ),
        (
            "regexMatch",
            "{{ regexMatch \"^[a-z]+$\" \"abc\" }}",
            Out("true"),
        ),
        (
            "regexReplaceAll",
            "{{ regexReplaceAll \"a(x*)b\" \"-ab-axxb-\" \"${1}W\" }}",
            Out("-W-xxW-"),
        ),
    ]);
}

/// Masterminds/sprig list_test.go, dict_test.go, numeric_test.go, defaults_test.go,
/// semver_test.go and their docs.
#[test]
fn sprig_lists_dicts_numbers_defaults() {
    check(&[
        ("first", "{{ first (list 1 2 3) }}", Out("1")),
        ("last", "{{ last (list 1 2 3) }}", Out("3")),
        ("rest", "{{ rest (list 1 2 3) }}", Out("[2 3]")),
        ("initial", "{{ initial (list 1 2 3) }}", Out("[1 2]")),
        ("append", "{{ append (list 1 2) 3 }}", Out("[1 2 3]")),
        ("has", "{{ has 4 (list 1 2 3 4) }}", Out("true")),
        ("uniq", "{{ uniq (list 1 1 2) }}", Out("[1 2]")),
        ("without", "{{ without (list 1 2 3) 2 }}", Out("[1 3]")),
        ("reverse", "{{ reverse (list 1 2 3) }}", Out("[3 2 1]")),
        ("until", "{{ until 3 }}", Out("[0 1 2]")),
        ("untilStep", "{{ untilStep 3 6 2 }}", Out("[3 5]")),
        (
            "keys sorted",
            "{{ keys (dict \"b\" 1 \"a\" 2) | sortAlpha }}",
            Out("[a b]"),
        ),
        ("hasKey", "{{ hasKey (dict \"a\" 1) \"a\" }}", Out("true")),
        ("get", "{{ get (dict \"a\" 1) \"a\" }}", Out("1")),
        (
            "pluck",
            "{{ pluck \"a\" (dict \"a\" 1) (dict \"a\" 2) }}",
            Out("[1 2]"),
        ),
        (
            "dig",
            "{{ dig \"a\" \"b\" \"dflt\" (dict \"a\" (dict \"b\" \"c\")) }}",
            Out("c"),
        ),
        (
            "dig default",
            "{{ dig \"a\" \"z\" \"dflt\" (dict \"a\" (dict \"b\" \"c\")) }}",
            Out("dflt"),
        ),
        ("toJson", "{{ toJson (dict \"a\" 1) }}", Out("{\"a\":1}")),
        ("add", "{{ add 1 2 }}", Out("3")),
        ("add float data", "{{ add .I 1 }}", Out("18")),
        ("sub", "{{ sub 5 2 }}", Out("3")),
        ("mul", "{{ mul 2 3 }}", Out("6")),
        ("div", "{{ div 7 2 }}", Out("3")),
        ("mod", "{{ mod 7 2 }}", Out("1")),
        ("max", "{{ max 1 5 3 }}", Out("5")),
        ("min", "{{ min 1 5 3 }}", Out("1")),
        ("atoi", "{{ atoi \"42\" }}", Out("42")),
        ("default empty", "{{ default \"foo\" \"\" }}", Out("foo")),
        ("default set", "{{ default \"foo\" \"bar\" }}", Out("bar")),
        (
            "empty",
            "{{ empty \"\" }} {{ empty 0 }} {{ empty 1 }}",
            Out("true true false"),
        ),
        ("coalesce", "{{ coalesce 0 1 2 }}", Out("1")),
        ("ternary", "{{ ternary \"yes\" \"no\" true }}", Out("yes")),
        (
            "semverCompare",
            "{{ semverCompare \">=1.2.0\" \"1.3.0\" }}",
            Out("true"),
        ),
        (
            "semverCompare no",
            "{{ semverCompare \"~1.2.0\" \"1.3.0\" }}",
            Out("false"),
        ),
        ("semver major", "{{ (semver \"1.2.3\").Major }}", Out("1")),
    ]);
}
