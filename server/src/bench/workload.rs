//! The benchmark's workload: one task contract and a workflow of `steps`
//! task steps in a chain, each step feeding the next (so they run one after
//! another, as in an order pipeline).

/// The task every step calls.
pub const TASK: &str = "bench.step";

/// The workflow's name for a chain of `steps` steps.
pub fn workflow_name(steps: u32) -> String {
    format!("BenchChain{steps}")
}

/// The `.orbit` source of the task contract and the workflow.
pub fn source(steps: u32) -> String {
    let steps = steps.max(1);
    let mut out = format!(
        "task \"{TASK}\" version \"1.0.0\" {{\n    input  {{ n: Int }}\n    output {{ n: Int }}\n}}\n\n\
         workflow {} version \"1.0.0\" {{\n    input {{ n: Int }}\n",
        workflow_name(steps)
    );
    for i in 1..=steps {
        let from = if i == 1 {
            "input.n".to_owned()
        } else {
            format!("s{}.n", i - 1)
        };
        out.push_str(&format!(
            "\n    step s{i} {{\n        worker \"{TASK}\"\n        with {{ n: {from} }}\n    }}\n"
        ));
    }
    out.push_str(&format!("\n    output {{ n: s{steps}.n }}\n}}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_compiles_for_any_chain_length() {
        for steps in [1, 3, 10] {
            let src = source(steps);
            let compiled = orbit_core::check::compile(
                &[orbit_core::check::Source {
                    name: "bench.orbit".into(),
                    text: src.clone(),
                }],
                &|_, _| None,
            );
            assert!(compiled.is_ok(), "{src}\n{:?}", compiled.diagnostics);
            assert_eq!(compiled.definitions.len(), 1);
        }
    }
}
