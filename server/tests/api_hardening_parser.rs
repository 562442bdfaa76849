//! Property-based fuzzing of the `.orbit` front end as the deploy endpoint
//! uses it: valid sources mutated (bytes deleted, inserted, duplicated,
//! swapped for punctuation) and random text go through
//! `orbit_core::check::compile`, which must either compile or report at least
//! one diagnostic — never panic. The same inputs deployed through the API
//! answer 200 or 422, never a 5xx. (The cargo-fuzz target
//! `core/fuzz/fuzz_targets/compile.rs` runs the same property under
//! libFuzzer.) `PROPTEST_CASES` raises the budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_support;

use guard_support::Harness;
use orbit_core::check::{compile, Source};
use proptest::prelude::*;
use std::sync::OnceLock;

const ORDER: &str = include_str!("../../examples/order.orbit");

fn seeds() -> Vec<&'static str> {
    vec![ORDER, guard_support::SOURCE]
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, String),
    Duplicate(usize, usize),
    Punct(usize, char),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Edit::Delete(a, n)),
        (
            any::<usize>(),
            prop_oneof![
                ".{0,12}",
                "[{}()\\[\\]\":,.*+!?<>=|&-]{1,6}",
                Just("step x { worker \"demo.work\" with { n: 1 } }".to_owned()),
                Just("{".repeat(300)),
                Just("(".repeat(300)),
                Just("9999999999999999999999999999".to_owned()),
                Just("\"\\u{110000}\"".to_owned()),
                Just("1.5e99999".to_owned()),
            ]
        )
            .prop_map(|(a, s)| Edit::Insert(a, s)),
        (any::<usize>(), 1usize..200).prop_map(|(a, n)| Edit::Duplicate(a, n)),
        (
            any::<usize>(),
            prop::sample::select(vec![
                '{', '}', '(', ')', '"', ':', ',', '.', '\0', '\n', 'é'
            ])
        )
            .prop_map(|(a, c)| Edit::Punct(a, c)),
    ]
}

fn boundary(text: &str, at: usize) -> usize {
    let mut i = at % (text.len() + 1);
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &str, e: &Edit) -> String {
    let mut s = text.to_owned();
    match e {
        Edit::Delete(a, n) => {
            let a = boundary(&s, *a);
            let b = boundary(&s, (a + n).min(s.len()));
            s.replace_range(a..b.max(a), "");
        }
        Edit::Insert(a, t) => {
            let a = boundary(&s, *a);
            s.insert_str(a, t);
        }
        Edit::Duplicate(a, n) => {
            let a = boundary(&s, *a);
            let b = boundary(&s, (a + n).min(s.len())).max(a);
            let piece = s[a..b].to_owned();
            s.insert_str(b, &piece);
        }
        Edit::Punct(a, c) => {
            let a = boundary(&s, *a);
            let b = s[a..].chars().next().map_or(a, |ch| a + ch.len_utf8());
            s.replace_range(a..b, &c.to_string());
        }
    }
    s
}

fn source() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0..seeds().len(), prop::collection::vec(edit(), 1..6)).prop_map(|(i, edits)| {
            edits.iter().fold(seeds()[i].to_owned(), |s, e| apply(&s, e))
        }),
        1 => ".{0,200}",
    ]
}

fn check(text: &str) {
    let sources = [Source {
        name: "fuzz.orbit".to_owned(),
        text: text.to_owned(),
    }];
    let compiled = compile(&sources, &|_, _| None);
    assert!(
        compiled.is_ok() || !compiled.diagnostics.is_empty(),
        "neither definitions nor diagnostics for {text:?}"
    );
}

struct World {
    runtime: tokio::runtime::Runtime,
    server: Harness,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime.block_on(Harness::start());
        World { runtime, server }
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn compile_never_panics(text in source()) {
        check(&text);
    }

    #[test]
    fn deploy_answers_200_or_422(text in source()) {
        let w = world();
        let body = serde_json::json!({"source": text, "filename": "fuzz.orbit"}).to_string();
        let r = w.runtime.block_on(w.server.post("/v1/definitions", None, &body));
        prop_assert!(
            r.status.as_u16() == 200 || r.status.as_u16() == 422 || r.status.as_u16() == 409,
            "{} {}", r.status, r.json
        );
    }
}

#[test]
fn seeds_compile() {
    for s in seeds() {
        let compiled = compile(
            &[Source {
                name: "seed.orbit".to_owned(),
                text: s.to_owned(),
            }],
            &|_, _| None,
        );
        assert!(compiled.is_ok(), "{:?}", compiled.diagnostics);
    }
}
