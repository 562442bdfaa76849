//! The diagnostics corpus: every `.orbit` file in `tests/diagnostics/` is
//! compiled and its rendered diagnostics (rustc style, no colors) are
//! compared with an insta snapshot. A file named `eNNNN_*.orbit` must report
//! code `ENNNN`, and every code of the registry must be reported by some
//! file.
#![allow(clippy::unwrap_used)]

use orbit_core::diagnostic::{codes::CODES, render};
use orbit_core::{compile, Compiled, Source};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/diagnostics");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "orbit"))
        .collect();
    files.sort();
    files
}

fn compile_file(path: &Path) -> (Compiled, String, String) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).unwrap();
    let compiled = compile(
        &[Source {
            name: name.clone(),
            text: text.clone(),
        }],
        &|_, _| None,
    );
    (compiled, name, text)
}

#[test]
fn corpus_snapshots() {
    for path in corpus() {
        let (compiled, name, text) = compile_file(&path);
        let rendered = render(&compiled.diagnostics, &[(name.as_str(), text.as_str())]);
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        insta::with_settings!({ snapshot_path => "diagnostics/snapshots", prepend_module_to_snapshot => false, description => text.clone(), omit_expression => true }, {
            insta::assert_snapshot!(stem, rendered);
        });
    }
}

#[test]
fn each_fixture_reports_the_code_it_is_named_after() {
    for path in corpus() {
        let stem = path.file_stem().unwrap().to_string_lossy().to_uppercase();
        let Some(code) = stem
            .split('_')
            .next()
            .filter(|c| c.starts_with('E') && c.len() == 5)
        else {
            continue;
        };
        let (compiled, ..) = compile_file(&path);
        assert!(
            compiled.diagnostics.iter().any(|d| d.code == code),
            "{} reports {:?}, not {code}",
            path.display(),
            compiled
                .diagnostics
                .iter()
                .map(|d| &d.code)
                .collect::<Vec<_>>()
        );
        assert!(
            compiled.definitions.iter().all(|d| d.workflow.name != "W"),
            "a failing workflow must not compile: {}",
            path.display()
        );
    }
}

#[test]
fn every_registered_code_has_a_fixture_that_triggers_it() {
    let mut seen = BTreeSet::new();
    for path in corpus() {
        let (compiled, ..) = compile_file(&path);
        seen.extend(compiled.diagnostics.into_iter().map(|d| d.code));
    }
    let missing: Vec<&str> = CODES
        .iter()
        .map(|c| c.code)
        .filter(|c| !seen.contains(*c))
        .collect();
    assert!(missing.is_empty(), "codes without a fixture: {missing:?}");
    let unknown: Vec<&String> = seen
        .iter()
        .filter(|c| !CODES.iter().any(|k| k.code == c.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "emitted codes missing from the registry: {unknown:?}"
    );
}

#[test]
fn independent_errors_are_all_reported_once_without_cascades() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/diagnostics/multi_errors_no_cascade.orbit");
    let (compiled, ..) = compile_file(&path);
    let got: Vec<(String, usize)> = compiled
        .diagnostics
        .iter()
        .map(|d| (d.code.clone(), d.line))
        .collect();
    let want: Vec<(String, usize)> = [
        ("E0101", 18), // input.itemz
        ("E0400", 26), // amount + "x"
        ("E0400", 28), // timeout: 30
        ("E0106", 29), // after: shipping
        ("E0010", 34), // order_id: ,
        ("E0300", 37), // colour:
        ("E0100", 39), // nope
    ]
    .iter()
    .map(|(c, l)| (c.to_string(), *l))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn diagnostics_serialize_to_json_with_position() {
    let compiled = compile(
        &[Source {
            name: "x.orbit".into(),
            text: "workflow W version \"1.0\" {\n  step s { sleep 1s }\n}\n".into(),
        }],
        &|_, _| None,
    );
    let json = orbit_core::diagnostic::to_json(&compiled.diagnostics);
    assert_eq!(json[0]["code"], "E0304");
    assert_eq!(json[0]["file"], "x.orbit");
    assert_eq!(json[0]["line"], 1);
    assert_eq!(json[0]["col"], 20);
    assert_eq!(json[0]["span"]["start"], 19);
    assert!(json[0]["message"].as_str().unwrap().contains("1.0"));
    assert!(json[0]["help"].as_str().unwrap().contains("semver"));
}
