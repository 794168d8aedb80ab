//! Pack loading: the webhook and schema rules CAPI applies to inline patches and
//! variables, reported as file:line: place: problem; all-or-nothing loading.

use std::path::Path;

use stackhook::engine::pack::PackError;
use stackhook::engine::{PackEngine, PatchEngine};

fn fixture(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/engine")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn load_errors(file: &str) -> Vec<String> {
    let name = Path::new(file)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    match PackEngine::from_sources(vec![(name, fixture(file))]) {
        Ok(_) => panic!("{file} loaded but is invalid"),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

#[test]
fn patch_rules_of_the_capi_webhook() {
    let errs = load_errors("bad/patches.yaml");
    let expected = [
        r#"patches.yaml:15: patches[0].definitions[0].selector.matchResources.machineDeploymentClass.names[0]: "a*b" is not a class name or glob: at most one "*", only at the start or the end"#,
        r#"patches.yaml:17: patches[0].definitions[0].jsonPatches[0].op: unsupported op "move": supported values: "add", "remove", "replace""#,
        // `~2` is no JSON pointer escape.
        r#"patches.yaml:20: patches[0].definitions[0].jsonPatches[1].path: not a JSON pointer: json pointer failed to parse; the first token in the partial-pointer starting at offset 16 is malformed"#,
        r#"patches.yaml:20: patches[0].definitions[0].jsonPatches[1].path: jsonPatch path must start with "/spec/""#,
        r#"patches.yaml:23: patches[0].definitions[0].jsonPatches[2].path: arrays can only be accessed using "0" (prepend) or "-" (append)"#,
        r#"patches.yaml:26: patches[0].definitions[0].jsonPatches[3].path: elements in arrays can not be accessed in a replace operation"#,
        r#"patches.yaml:28: patches[0].definitions[0].jsonPatches[4]: jsonPatch can not define both value and valueFrom"#,
        r#"patches.yaml:33: patches[0].definitions[0].jsonPatches[5]: jsonPatch must define one of value or valueFrom"#,
        r#"patches.yaml:38: patches[0].definitions[0].jsonPatches[6].valueFrom.variable: variable with name "image" cannot be found: the pack declares no such variable"#,
        r#"patches.yaml:42: patches[0].definitions[0].jsonPatches[7].valueFrom.variable: "builtin.cluster.nonsense" is not a defined builtin variable"#,
        r#"patches.yaml:44: patches[0].definitions[1].selector.matchResources: no selector enabled"#,
    ];
    assert_eq!(errs[..expected.len()], expected);
    // The template parser's wording is its own; the place and the reason are ours.
    assert_eq!(errs.len(), expected.len() + 1);
    assert!(
        errs[expected.len()].starts_with(
            "patches.yaml:50: patches[0].definitions[1].jsonPatches[0].valueFrom.template: template can not be parsed: "
        ),
        "{}",
        errs[expected.len()]
    );
}

#[test]
fn variable_rules_of_capi() {
    let errs = load_errors("bad/variables.yaml");
    assert_eq!(
        errs,
        [
            r#"variables.yaml:3: variables[0].name: "builtin" is reserved for CAPI's builtin variables"#,
            r#"variables.yaml:7: variables[1].name: variable name must not contain ".""#,
            r#"variables.yaml:10: variables[1].schema.openAPIV3Schema.type: type must be a single string (a list of types cannot be decoded by CAPI)"#,
            r#"variables.yaml:18: variables[2].schema.openAPIV3Schema.properties.count.minimum: must be an integer (int64)"#,
            r#"variables.yaml:21: variables[2].schema.openAPIV3Schema.properties.s.nullable: field not allowed in a ClusterClass variable schema"#,
            r#"variables.yaml:23: variables[2].schema.openAPIV3Schema.properties.list.items: items must be set for type array (structural schema)"#,
        ]
    );
}

#[test]
fn pack_name_must_be_a_dns_label() {
    let errs = load_errors("bad/name.yaml");
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with(r#"name.yaml:1: name: "Not_A_Label" is not a DNS-1123 label"#),
        "{}",
        errs[0]
    );
}

#[test]
fn unknown_fields_are_named_with_their_place() {
    assert_eq!(
        load_errors("bad/shape.yaml"),
        ["shape.yaml:14: patches[0].definitions[0].jsonPatches[0].extra: unknown field `extra`, expected one of `op`, `path`, `value`, `valueFrom`"]
    );
}

#[test]
fn invalid_yaml_names_the_file() {
    let err = PackEngine::from_sources(vec![("broken.yaml".into(), "name: [unclosed\n".into())])
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("broken.yaml: not valid YAML: "), "{err}");
}

#[test]
fn bad_default_and_cel_are_load_errors() {
    let src = r#"
name: x
variables:
- name: v
  schema:
    openAPIV3Schema:
      type: object
      properties:
        count: {type: integer, minimum: 3, default: 1}
- name: w
  schema:
    openAPIV3Schema:
      type: string
      x-kubernetes-validations:
      - rule: "self.size() >"
"#;
    let err = PackEngine::from_sources(vec![("x.yaml".into(), src.into())]).unwrap_err();
    let problems = err.problems();
    assert_eq!(problems.len(), 2, "{err}");
    assert_eq!(
        problems[0].place,
        "variables[0].schema.openAPIV3Schema.properties.count.default"
    );
    assert!(
        problems[0].problem.starts_with("default is not valid"),
        "{err}"
    );
    assert_eq!(
        problems[1].place,
        "variables[1].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"
    );
    assert!(
        problems[1].problem.starts_with("CEL rule does not compile"),
        "{err}"
    );
}

#[test]
fn loading_a_directory_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("one.yaml"), fixture("good/one.yaml")).unwrap();
    assert!(PackEngine::from_dir(dir.path()).is_ok());
    std::fs::write(dir.path().join("zz-bad.yaml"), fixture("bad/name.yaml")).unwrap();
    let err = PackEngine::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, PackError::Invalid(_)));
    let msg = err.to_string();
    assert!(msg.contains("zz-bad.yaml:1: name: "), "{msg}");
}

#[test]
fn directory_packs_become_handlers_and_other_files_are_ignored() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/engine/good");
    let e = PackEngine::from_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let h = e.handlers();
    // The generic handler first, then one per pack, the hook in the name.
    assert_eq!(
        h.generate_patches,
        [
            "generate-patches",
            "one-generate-patches",
            "two-generate-patches"
        ]
    );
    assert_eq!(
        h.discover_variables,
        [
            "discover-variables",
            "one-discover-variables",
            "two-discover-variables"
        ]
    );
    assert_eq!(
        h.validate_topology,
        [
            "validate-topology",
            "one-validate-topology",
            "two-validate-topology"
        ]
    );
}

#[test]
fn duplicate_pack_names_across_files() {
    let a = ("a.yaml".to_string(), "name: same\n".to_string());
    let b = ("b.yaml".to_string(), "\nname: same\n".to_string());
    let err = PackEngine::from_sources(vec![b, a])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        r#"b.yaml:2: name: pack name "same" is already used by a.yaml"#
    );
}

#[test]
fn empty_or_missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(PackEngine::from_dir(dir.path()).is_err());
    let err = PackEngine::from_dir(dir.path().join("nope")).unwrap_err();
    assert!(matches!(err, PackError::Io { .. }), "{err}");
}

#[test]
fn embedded_packs_load_and_are_served() {
    let e = PackEngine::embedded().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        e.handlers().generate_patches,
        [
            "generate-patches",
            "addons-v1-generate-patches",
            "cilium-generate-patches",
            "magnum-v1-generate-patches",
            "networking-v1-generate-patches",
            "openstack-generate-patches",
            "openstack-v1-generate-patches",
            "vip-v1-generate-patches"
        ]
    );
}

#[test]
fn versions_of_one_pack_are_served_side_by_side() {
    let pack = |v: u32, marker: &str| {
        format!(
            "name: net\nversion: {v}\npatches:\n- name: p\n  definitions:\n  - selector: {{apiVersion: infra.example/v1, kind: Thing, matchResources: {{infrastructureCluster: true}}}}\n    jsonPatches:\n    - {{op: add, path: /spec/template/spec/marker, value: {marker}}}\n"
        )
    };
    let e = PackEngine::from_sources(vec![
        ("net-v1.yaml".into(), pack(1, "one")),
        ("net-v2.yaml".into(), pack(2, "two")),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        e.handlers().generate_patches,
        [
            "generate-patches",
            "net-v1-generate-patches",
            "net-v2-generate-patches"
        ]
    );
    let p1 = e.pack_for_handler("net-v1-generate-patches").unwrap();
    let p2 = e.pack_for_handler("net-v2-generate-patches").unwrap();
    assert_eq!((p1.version, p2.version), (Some(1), Some(2)));
    assert!(e.pack_for_handler("net-generate-patches").is_none());

    // The same version twice is a clash; version 0 does not exist.
    let err = PackEngine::from_sources(vec![
        ("a.yaml".into(), pack(1, "a")),
        ("b.yaml".into(), pack(1, "b")),
    ])
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        r#"b.yaml:1: name: pack name "net-v1" is already used by a.yaml"#
    );
    let err = PackEngine::from_sources(vec![("z.yaml".into(), pack(0, "z"))])
        .unwrap_err()
        .to_string();
    assert_eq!(err, "z.yaml:2: version: versions start at 1");
}
