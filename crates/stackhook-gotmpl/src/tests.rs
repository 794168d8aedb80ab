//! Expected outputs follow Go's `text/template`, `fmt` and sprig's documented behaviour.

use super::*;
use serde_json::json;

fn data() -> Value {
    json!({
        "n": 3, "big": 1000000, "half": 1.5, "s": "hello", "t": true, "f": false,
        "nul": null, "list": ["a", "b", "c"], "nums": [1, 2, 3],
        "m": {"b": 2, "a": 1}, "empty": "", "ver": "v1.29.3",
        "builtin": {"cluster": {"name": "c1", "namespace": "ns"}},
    })
}

fn r(src: &str) -> String {
    match Template::parse("tpl", src) {
        Ok(t) => match t.render(&data()) {
            Ok(s) => s,
            Err(e) => panic!("render {src:?}: {e}"),
        },
        Err(e) => panic!("parse {src:?}: {e}"),
    }
}

fn r_err(src: &str) -> String {
    match Template::parse("tpl", src) {
        Ok(t) => match t.render(&data()) {
            Ok(s) => panic!("{src:?} rendered {s:?}, wanted an error"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

fn v(src: &str) -> Value {
    match Template::parse("tpl", src).and_then(|t| t.render_value(&data())) {
        Ok(v) => v,
        Err(e) => panic!("{src:?}: {e}"),
    }
}

#[test]
fn send_sync_clone_debug() {
    fn check<T: Send + Sync + Clone + std::fmt::Debug>() {}
    check::<Template>();
}

#[test]
fn fields_and_missing_values() {
    assert_eq!(r("{{ .s }}-{{ .builtin.cluster.name }}"), "hello-c1");
    assert_eq!(r("{{ .missing }}"), "<no value>");
    assert_eq!(r("{{ .missing.deeper }}"), "<no value>");
    assert_eq!(r("{{ .nul }}"), "<no value>");
    assert_eq!(r("{{ print .missing }}"), "<nil>");
    assert!(r_err("{{ .nul.x }}").contains("nil pointer evaluating interface {}.x"));
    assert!(r_err("{{ .s.x }}").contains("can't evaluate field x in type string"));
    assert_eq!(r("{{ . | len }}"), "13");
}

#[test]
fn float_printing() {
    assert_eq!(r("{{ .n }}"), "3");
    assert_eq!(r("{{ .big }}"), "1e+06");
    assert_eq!(r("{{ .half }}"), "1.5");
    let t = Template::parse("tpl", "{{ .a }} {{ .b }} {{ .c }} {{ .d }} {{ .e }}")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = t
        .render(&json!({"a": 1e21, "b": 0.0001, "c": 0.00001, "d": 100000000000000000000.0, "e": 123456}))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, "1e+21 0.0001 1e-05 1e+20 123456");
    assert_eq!(
        r("{{ .m }} {{ .list }} {{ .nums }}"),
        "map[a:1 b:2] [a b c] [1 2 3]"
    );
}

#[test]
fn trimming_and_comments() {
    assert_eq!(r("a  {{- .s -}}  b"), "ahellob");
    assert_eq!(r("a {{/* c */}} b"), "a  b");
    assert_eq!(r("a {{- /* c */ -}} b"), "ab");
    assert_eq!(r("{{-3}}"), "-3");
    assert_eq!(r("x\n{{- if .t }}\ny{{ end }}"), "x\ny");
}

#[test]
fn control_structures() {
    assert_eq!(r("{{ if .t }}y{{ else }}n{{ end }}"), "y");
    assert_eq!(r("{{ if .f }}1{{ else if .n }}2{{ else }}3{{ end }}"), "2");
    assert_eq!(r("{{ with .s }}{{ . }}{{ end }}"), "hello");
    assert_eq!(r("{{ with .empty }}x{{ else }}none{{ end }}"), "none");
    assert_eq!(
        r("{{ range $i, $v := .list }}{{ $i }}={{ $v }} {{ end }}"),
        "0=a 1=b 2=c "
    );
    assert_eq!(
        r("{{ range $k, $v := .m }}{{ $k }}:{{ $v }},{{ end }}"),
        "a:1,b:2,"
    );
    assert_eq!(r("{{ range .missing }}x{{ else }}empty{{ end }}"), "empty");
    assert_eq!(
        r("{{ range .nums }}{{ if eq . 2.0 }}{{ continue }}{{ end }}{{ if eq . 3.0 }}{{ break }}{{ end }}{{ . }}{{ end }}"),
        "1"
    );
    assert_eq!(r("{{ range 3 }}{{ . }}{{ end }}"), "012");
    assert_eq!(
        r("{{ $x := 1 }}{{ if .t }}{{ $x = 2 }}{{ end }}{{ $x }}"),
        "2"
    );
    assert_eq!(r("{{ $ := . }}{{ $.s }}"), "hello");
    assert_eq!(r("{{ with $x := .s }}{{ $x }}{{ end }}"), "hello");
    assert_eq!(
        r(r#"{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" .s }}"#),
        "[hello]"
    );
    assert_eq!(r(r#"{{ block "b" .n }}<{{ . }}>{{ end }}"#), "<3>");
    assert_eq!(r("{{ (.builtin.cluster).name }}"), "c1");
}

#[test]
fn literals() {
    assert_eq!(
        r("{{ \"a\\tb\" }}|{{ `raw\\n` }}|{{ 'a' }}|{{ 0x10 }}|{{ 1e3 }}|{{ 2.50 }}|{{ true }}"),
        "a\tb|raw\\n|97|16|1000|2.5|true"
    );
    assert!(r_err("{{ nil }}").contains("nil is not a command"));
}

#[test]
fn builtins() {
    assert_eq!(
        r("{{ and 1 0 2 }}|{{ or 0 \"\" 5 }}|{{ not .f }}"),
        "0|5|true"
    );
    assert_eq!(r("{{ len .list }}|{{ len .s }}|{{ len .m }}"), "3|5|2");
    assert_eq!(
        r("{{ index .list 1 }}|{{ index .m \"a\" }}|{{ index .m \"zz\" }}"),
        "b|1|<no value>"
    );
    assert_eq!(
        r("{{ print 1 2 \"x\" 3 }}|{{ println \"a\" 1 }}"),
        "1 2x3|a 1\n"
    );
    assert_eq!(
        r("{{ printf \"%s-%05.1f-%v-%d\" .s .half .big 7 }}"),
        "hello-001.5-1e+06-7"
    );
    assert_eq!(r("{{ printf \"%d\" .n }}"), "%!d(float64=3)");
    assert_eq!(r("{{ eq .s \"hello\" }}|{{ ne 1 2 }}|{{ lt 1 2 }}|{{ le 2 2 }}|{{ gt .n 2.0 }}|{{ ge \"b\" \"a\" }}"), "true|true|true|true|true|true");
    assert_eq!(r("{{ eq .n 1.0 2.0 3.0 }}"), "true");
    assert!(r_err("{{ eq .n 3 }}").contains("incompatible types for comparison"));
    assert_eq!(r("{{ eq .missing \"x\" }}"), "false");
    assert_eq!(
        r("{{ html \"<a href='x'>&</a>\" }}"),
        "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;"
    );
    assert_eq!(r("{{ js \"it's <b>\" }}"), "it\\'s \\u003Cb\\u003E");
    assert_eq!(r("{{ urlquery \"a b&c\" }}"), "a+b%26c");
    assert!(r_err("{{ call .s }}").contains("error calling call"));
}

#[test]
fn parse_errors() {
    assert!(r_err("{{ nosuchfunc 1 }}").contains("function \"nosuchfunc\" not defined"));
    assert!(r_err("{{ if .t }}").contains("unexpected EOF"));
    assert!(r_err("{{ end }}").contains("unexpected {{end}}"));
    assert!(r_err("{{ $x }}").contains("undefined variable"));
    assert!(r_err("{{ .a").contains("tpl:1"));
    assert!(r_err("{{ break }}").contains("outside"));
    assert!(r_err("{{ env \"HOME\" }}").contains("not defined"));
    assert!(r_err("{{ now }}").contains("not defined"));
    assert!(r_err("{{ uuidv4 }}").contains("not defined"));
}

#[test]
fn exec_error_format() {
    let e = r_err("{{ fail \"boom\" }}");
    assert_eq!(
        e,
        "template: tpl:1:3: executing \"tpl\" at <fail>: error calling fail: boom"
    );
}

#[test]
fn sprig_strings() {
    assert_eq!(r("{{ trim \"  x  \" }}|{{ trimAll \"$\" \"$5.00$\" }}|{{ trimPrefix \"-\" \"-x\" }}|{{ trimSuffix \"-\" \"x-\" }}"), "x|5.00|x|x");
    assert_eq!(r("{{ upper .s }}|{{ lower \"HeLLo\" }}|{{ title \"hello world\" }}|{{ untitle \"Hello World\" }}"), "HELLO|hello|Hello World|hello world");
    assert_eq!(r("{{ repeat 3 \"ab\" }}|{{ substr 0 5 \"hello world\" }}|{{ nospace \"h e l\" }}|{{ trunc 5 \"hello world\" }}|{{ trunc -5 \"hello world\" }}"), "ababab|hello|hel|hello|world");
    assert_eq!(r("{{ abbrev 5 \"hello world\" }}|{{ abbrevboth 5 10 \"1234 5678 9123\" }}|{{ initials \"First Try\" }}"), "he...|...5678...|FT");
    assert_eq!(r("{{ wrap 5 \"Hello World\" }}"), "Hello\nWorld");
    assert_eq!(r("{{ contains \"cat\" \"catch\" }}|{{ hasPrefix \"cat\" \"catch\" }}|{{ hasSuffix \"ch\" \"catch\" }}"), "true|true|true");
    assert_eq!(
        r("{{ quote .s .n }}|{{ squote .s }}|{{ cat \"hello\" \"beautiful\" \"world\" }}"),
        "\"hello\" \"3\"|'hello'|hello beautiful world"
    );
    assert_eq!(r("{{ .missing | quote }}"), "");
    assert_eq!(
        r("{{ indent 2 \"a\\nb\" }}|{{ nindent 2 \"a\" }}"),
        "  a\n  b|\n  a"
    );
    assert_eq!(
        r("{{ \"I Am Henry VIII\" | replace \" \" \"-\" }}"),
        "I-Am-Henry-VIII"
    );
    assert_eq!(
        r("{{ plural \"one anchovy\" \"many anchovies\" 2 }}"),
        "many anchovies"
    );
    assert_eq!(r("{{ snakecase \"FirstName\" }}|{{ camelcase \"http_server\" }}|{{ kebabcase \"FirstName\" }}|{{ swapcase \"This Is A.Test\" }}"), "first_name|HttpServer|first-name|tHIS iS a.tEST");
    assert_eq!(r("{{ regexMatch \"^[a-z]+$\" .s }}|{{ regexFindAll \"[2,4,6,8]\" \"123456789\" -1 }}|{{ regexFind \"[a-zA-Z][1-9]\" \"abcd1234\" }}"), "true|[2 4 6 8]|d1");
    assert_eq!(r("{{ regexReplaceAll \"a(x*)b\" \"-ab-axxb-\" \"${1}W\" }}|{{ regexReplaceAllLiteral \"a(x*)b\" \"-ab-axxb-\" \"${1}\" }}|{{ regexSplit \"z+\" \"pizza\" -1 }}"), "-W-xxW-|-${1}-${1}-|[pi a]");
    assert_eq!(r("{{ $a := split \"$\" \"foo$bar$baz\" }}{{ $a._0 }}{{ $a._2 }}|{{ splitList \"$\" \"foo$bar\" }}|{{ $b := splitn \"$\" 2 \"foo$bar$baz\" }}{{ $b._1 }}"), "foobaz|[foo bar]|bar$baz");
    assert_eq!(r("{{ list 1 2 3 | join \"-\" }}|{{ sortAlpha (list \"c\" \"a\" \"b\") }}|{{ toStrings (list 1 2) }}|{{ toString 1.5 }}"), "1-2-3|[a b c]|[1 2]|1.5");
    assert_eq!(r("{{ b64enc \"hello\" }}|{{ b64dec \"aGVsbG8=\" }}|{{ b32enc \"hello\" }}|{{ b32dec \"NBSWY3DP\" }}"), "aGVsbG8=|hello|NBSWY3DP|hello");
    assert_eq!(
        r("{{ sha256sum \"abc\" }}"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        r("{{ sha1sum \"abc\" }}|{{ adler32sum \"hello\" }}"),
        "a9993e364706816aba3e25717850c26c9cd0d89d|103547413"
    );
    assert!(r_err("{{ trim .n }}").contains("wrong type for value; expected string; got float64"));
    assert!(r_err("{{ repeat .n \"x\" }}").contains("expected int; got float64"));
}

#[test]
fn sprig_defaults() {
    assert_eq!(r("{{ .missing | default \"d\" }}|{{ .empty | default \"d\" }}|{{ .f | default \"d\" }}|{{ .s | default \"d\" }}|{{ 0 | default 5 }}"), "d|d|d|hello|5");
    assert_eq!(
        r("{{ list | default \"d\" }}|{{ dict | default \"d\" }}"),
        "d|d"
    );
    assert_eq!(
        r("{{ empty .empty }}|{{ empty .s }}|{{ empty 0 }}|{{ empty .missing }}"),
        "true|false|true|true"
    );
    assert_eq!(
        r("{{ coalesce .missing .empty \"x\" }}|{{ all 1 \"a\" }}|{{ any 0 \"\" }}"),
        "x|true|false"
    );
    assert_eq!(
        r("{{ ternary \"yes\" \"no\" .t }}|{{ .f | ternary \"yes\" \"no\" }}"),
        "yes|no"
    );
    assert_eq!(r("{{ compact (list 1 \"\" nil 2) }}"), "[1 2]");
    assert_eq!(r("{{ toJson .m }}|{{ toJson .big }}|{{ toJson .half }}|{{ toJson \"<&>\" }}|{{ toRawJson \"<&>\" }}"), "{\"a\":1,\"b\":2}|1000000|1.5|\"\\u003c\\u0026\\u003e\"|\"<&>\"");
    assert_eq!(
        r("{{ toPrettyJson (dict \"a\" (list 1)) }}"),
        "{\n  \"a\": [\n    1\n  ]\n}"
    );
    assert_eq!(r("{{ (fromJson \"{\\\"a\\\": 5}\").a }}"), "5");
    assert_eq!(
        r("{{ $c := deepCopy .m }}{{ $_ := set $c \"a\" 9 }}{{ .m.a }}{{ $c.a }}"),
        "19"
    );
}

#[test]
fn sprig_math() {
    assert_eq!(r("{{ add .n 1 }}|{{ add1 .n }}|{{ sub 10 .n }}|{{ div 7 2 }}|{{ mod 7 2 }}|{{ mul 2 3 4 }}"), "4|4|7|3|1|24");
    assert_eq!(
        r("{{ max 1 5 3 }}|{{ min 4 2 9 }}|{{ floor 1.7 }}|{{ ceil 1.2 }}|{{ round 1.23556 2 }}"),
        "5|2|1|2|1.24"
    );
    assert_eq!(r("{{ int .half }}|{{ int64 \"42\" }}|{{ float64 \"1.5\" }}|{{ atoi \"12\" }}|{{ int \"3.0\" }}|{{ int \"abc\" }}"), "1|42|1.5|12|3|0");
    assert_eq!(
        r("{{ seq 5 }}|{{ seq 3 -1 }}|{{ seq 0 2 10 }}|{{ until 3 }}|{{ untilStep 0 10 3 }}"),
        "1 2 3 4 5|3 2 1 0 -1|0 2 4 6 8 10|[0 1 2]|[0 3 6 9]"
    );
    assert_eq!(r("{{ addf 1.1 2.2 }}|{{ subf 1.5 0.5 }}|{{ mulf 1.5 2 }}|{{ divf 10 4 }}|{{ maxf 1 2.5 }}|{{ minf 1 2.5 }}|{{ add1f 1.5 }}"), "3.3|1|3|2.5|2.5|1|2.5");
    assert_eq!(
        r("{{ typeOf (add 1 1) }}|{{ typeOf (len .s) }}|{{ typeOf .n }}|{{ typeOf 1 }}"),
        "int64|int|float64|int"
    );
    assert!(r_err("{{ div 1 0 }}").contains("integer divide by zero"));
    assert!(r_err("{{ until 10000000 }}").contains("limit"));
}

#[test]
fn sprig_lists_and_dicts() {
    assert_eq!(
        r("{{ first .list }}|{{ rest .list }}|{{ last .list }}|{{ initial .list }}"),
        "a|[b c]|c|[a b]"
    );
    assert_eq!(r("{{ append .list \"d\" }}|{{ prepend .list \"z\" }}|{{ concat .list (list 1) }}|{{ reverse .list }}"), "[a b c d]|[z a b c]|[a b c 1]|[c b a]");
    assert_eq!(r("{{ uniq (list 1 1 2) }}|{{ without .list \"b\" }}|{{ has \"b\" .list }}|{{ has 1 .nums }}|{{ has 1.0 .nums }}"), "[1 2]|[a c]|true|false|true");
    assert_eq!(
        r("{{ slice .list 1 }}|{{ slice .list 1 2 }}|{{ chunk 2 .nums }}"),
        "[b c]|[b]|[[1 2] [3]]"
    );
    assert_eq!(r("{{ $d := dict \"x\" 1 \"y\" \"z\" }}{{ $d.x }}{{ get $d \"y\" }}{{ get $d \"q\" }}|{{ hasKey $d \"x\" }}"), "1z|true");
    assert_eq!(
        r("{{ $d := dict \"a\" 1 }}{{ $_ := set $d \"b\" 2 }}{{ $d }}|{{ unset $d \"a\" }}"),
        "map[a:1 b:2]|map[b:2]"
    );
    assert_eq!(
        r("{{ keys .m }}|{{ values .m }}|{{ pick .m \"a\" }}|{{ omit .m \"a\" }}"),
        "[a b]|[1 2]|map[a:1]|map[b:2]"
    );
    assert_eq!(
        r("{{ pluck \"a\" (dict \"a\" 1) (dict \"a\" 2) }}"),
        "[1 2]"
    );
    assert_eq!(r("{{ $d := dict \"a\" 1 \"n\" (dict \"x\" 1) }}{{ merge $d (dict \"a\" 2 \"b\" 3 \"n\" (dict \"y\" 2)) }}"), "map[a:1 b:3 n:map[x:1 y:2]]");
    assert_eq!(
        r("{{ mergeOverwrite (dict \"a\" 1) (dict \"a\" 2 \"b\" 3) }}"),
        "map[a:2 b:3]"
    );
    assert_eq!(r("{{ dig \"builtin\" \"cluster\" \"name\" \"none\" . }}|{{ dig \"x\" \"y\" \"none\" . }}"), "c1|none");
    assert_eq!(r("{{ deepEqual (list 1 2) (list 1 2) }}|{{ kindOf .list }}|{{ kindIs \"map\" .m }}|{{ typeIs \"string\" .s }}|{{ typeOf .list }}"), "true|slice|true|true|[]interface {}");
}

#[test]
fn sprig_semver_paths_urls() {
    assert_eq!(r("{{ semverCompare \">=1.28.0\" .ver }}|{{ semverCompare \"~1.28\" .ver }}|{{ semverCompare \"^1.2\" \"1.9.9\" }}"), "true|false|true");
    assert_eq!(r("{{ (semver .ver).Minor }}|{{ (semver \"1.2.3-beta.1+b5\").Prerelease }}|{{ semver \"v1.2\" }}"), "29|beta.1|1.2.0");
    assert_eq!(
        r("{{ ((semver \"1.2.3\").Compare (semver \"1.3.0\")) }}"),
        "-1"
    );
    assert!(r_err("{{ semver \"bad\" }}").contains("Invalid Semantic Version"));
    assert_eq!(r("{{ base \"/a/b.txt\" }}|{{ dir \"/a/b.txt\" }}|{{ ext \"b.txt\" }}|{{ clean \"/a/../b\" }}|{{ isAbs \"/a\" }}"), "b.txt|/a|.txt|/b|true");
    assert_eq!(r("{{ (urlParse \"https://user@example.com:8443/p/a?q=1#f\").hostname }}|{{ urlJoin (dict \"scheme\" \"https\" \"host\" \"h\" \"path\" \"/x\" \"query\" \"a=b\") }}"), "example.com|https://h/x?a=b");
}

#[test]
fn render_value_yaml11() {
    assert_eq!(v("yes"), json!(true));
    assert_eq!(v("on"), json!(true));
    assert_eq!(v("1.20"), json!(1.2));
    assert_eq!(v("\"yes\""), json!("yes"));
    assert_eq!(v("010"), json!(8));
    assert_eq!(v("1e3"), json!(1000));
    assert_eq!(v("~"), json!(null));
    assert_eq!(v("  \n "), json!(null));
    assert_eq!(v("{{ .big }}"), json!(1000000));
    assert_eq!(v("{{ .n }}"), json!(3));
    assert_eq!(v("{{ .half }}"), json!(1.5));
    assert_eq!(v("\"{{ .n }}\""), json!("3"));
    assert_eq!(v("{{ .missing }}"), json!("<no value>"));
    assert_eq!(v("{{ toJson .m }}"), json!({"a": 1, "b": 2}));
    assert_eq!(v("- {{ .s }}\n- {{ .t }}"), json!(["hello", true]));
    assert_eq!(v("{{ .builtin.cluster.name }}-x"), json!("c1-x"));
    assert!(matches!(
        Template::parse("tpl", "a: [").and_then(|t| t.render_value(&data())),
        Err(Error::Yaml(_))
    ));
}

#[test]
fn limits_do_not_hang_or_panic() {
    assert!(r_err(
        "{{ range $i := until 100000 }}{{ range $j := until 100000 }}{{ end }}{{ end }}"
    )
    .contains("limit"));
    assert!(
        r_err(r#"{{ define "a" }}{{ template "a" }}{{ end }}{{ template "a" }}"#).contains("depth")
    );
    assert!(r_err(&"{{ (".repeat(500)).contains("tpl:1"));
    assert!(r_err(&"{{ if 1 }}".repeat(500)).contains("nested too deeply"));
    assert!(r_err("{{ repeat 100000000 \"abc\" }}").contains("limit"));
    for src in [
        "{{",
        "}}",
        "{{ . | }}",
        "{{ \"\\x\" }}",
        "{{ 'ab' }}",
        "{{ 0x }}",
        "{{ $x := }}",
        "{{ range $a, $b, $c := . }}{{end}}",
        "{{ . . }}",
        "{{ (1) }}",
        "{{ .a | 1 }}",
        "{{/* x",
        "{{ define \"x\" }}",
        "{{ template \"nope\" }}",
        "{{ index .list 9 }}",
        "{{ slice .s 1 }}",
        "{{ substr 5 1 \"abc\" }}",
        "{{ substr 0 2 \"é\" }}",
    ] {
        let _ = Template::parse("tpl", src).map(|t| t.render(&data()));
    }
}

#[test]
fn prepared_data_is_shared_but_never_changed_by_a_render() {
    let d = data();
    let prepared = Prepared::new();
    let t = |src: &str| Template::parse("tpl", src).unwrap();
    // Go decodes the JSON afresh for every execution: what one template sets in a map,
    // the next one does not see.
    let setter = t(r#"{{ $_ := set .m "z" 26 }}{{ $_ := unset .builtin "cluster" }}{{ .m.z }}"#);
    let merger = t(r#"{{ $_ := mergeOverwrite .m (dict "a" 9) }}{{ .m.a }}"#);
    let reader = t("{{ .m.z }} {{ .m.a }} {{ .builtin.cluster.name }} {{ .list }}");
    assert_eq!(
        reader.render_prepared(&d, &prepared).unwrap(),
        "<no value> 1 c1 [a b c]"
    );
    assert_eq!(setter.render_prepared(&d, &prepared).unwrap(), "26");
    assert_eq!(merger.render_prepared(&d, &prepared).unwrap(), "9");
    assert_eq!(
        reader.render_prepared(&d, &prepared).unwrap(),
        "<no value> 1 c1 [a b c]"
    );
    // The same outputs as without sharing, errors included.
    for src in [
        "{{ .n }} {{ .half }} {{ .m }}",
        "{{ .builtin | toJson }}",
        "{{ fail \"no\" }}",
    ] {
        assert_eq!(
            t(src).render_prepared(&d, &prepared),
            t(src).render(&d),
            "{src}"
        );
    }
    assert_eq!(
        t("a: {{ .n }}")
            .render_value_prepared(&d, &prepared)
            .unwrap(),
        json!({"a": 3})
    );
}

#[test]
fn only_templates_naming_a_map_changing_function_get_their_own_copy() {
    for (src, mutates) in [
        ("{{ set . \"a\" 1 }}", true),
        ("{{ .x | unset \"k\" }}", true),
        ("{{ mustMergeOverwrite .a .b }}", true),
        ("{{ .offset }} {{ .reset }} {{ .dataset }}", false),
        // A string literal counts too: one copy more, never a shared change.
        ("{{ hasKey .m \"set\" }}", true),
        ("{{ .m | toJson }}", false),
    ] {
        assert_eq!(names_a_mutating_function(src), mutates, "{src}");
    }
}
