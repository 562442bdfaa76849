//! Tests over the book (`docs/src/**/*.md`): every ```orbit code block must
//! compile without diagnostics, every ```orbit,compile_fail,EXXXX block must
//! be reported with that code (on the error pages, with that code alone),
//! and every registered diagnostic code must have such a failing example on
//! its page in `docs/src/errors/`.
//!
//! Fence info strings: `orbit` (must compile), `orbit,compile_fail,E0400`
//! (must fail with E0400), `orbit,ignore` (a fragment; not compiled — keep
//! these rare). Blocks in other languages are not looked at.

#![allow(clippy::unwrap_used)]

use orbit_core::diagnostic::codes::CODES;
use orbit_core::{compile, Source};
use std::path::{Path, PathBuf};

/// What a block is expected to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// Compile with no diagnostics.
    Compile,
    /// Produce a diagnostic with this code.
    Fail(String),
    /// Not compiled.
    Ignore,
}

/// One ```orbit block of the book.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    /// `docs/src/...md:LINE` of the opening fence.
    origin: String,
    expect: Expect,
    text: String,
}

/// The expectation an info string declares, `None` for a block that is not
/// ORBIT, or an error for a malformed ORBIT fence.
fn parse_info(info: &str) -> Option<Result<Expect, String>> {
    let mut parts = info.split(',').map(str::trim);
    if parts.next() != Some("orbit") {
        return None;
    }
    let rest: Vec<&str> = parts.filter(|p| !p.is_empty()).collect();
    Some(match rest.as_slice() {
        [] => Ok(Expect::Compile),
        ["ignore"] => Ok(Expect::Ignore),
        ["compile_fail", code] if is_code(code) => Ok(Expect::Fail(code.to_string())),
        _ => Err(format!("malformed fence info string `{info}`")),
    })
}

fn is_code(s: &str) -> bool {
    s.len() == 5 && s.starts_with('E') && s[1..].bytes().all(|b| b.is_ascii_digit())
}

/// Every ```orbit block of one markdown text. A fence is a line starting
/// (after indentation) with three or more backticks; the block ends at a
/// line holding a fence at least as long.
fn extract(name: &str, markdown: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        let ticks = trimmed.bytes().take_while(|b| *b == b'`').count();
        if ticks < 3 {
            continue;
        }
        let info = trimmed[ticks..].trim();
        let mut body = Vec::new();
        let mut closed = false;
        for (_, inner) in lines.by_ref() {
            let t = inner.trim_start();
            let n = t.bytes().take_while(|b| *b == b'`').count();
            if n >= ticks && t[n..].trim().is_empty() {
                closed = true;
                break;
            }
            body.push(inner);
        }
        let origin = format!("{name}:{}", i + 1);
        if !closed {
            return Err(format!("{origin}: code block is never closed"));
        }
        match parse_info(info) {
            None => {}
            Some(Err(e)) => return Err(format!("{origin}: {e}")),
            Some(Ok(expect)) => {
                let mut text = body.join("\n");
                text.push('\n');
                blocks.push(Block {
                    origin,
                    expect,
                    text,
                });
            }
        }
    }
    Ok(blocks)
}

fn docs_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src")
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Every ```orbit block of the book, in file order.
fn book_blocks() -> Vec<Block> {
    let root = docs_src();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(!files.is_empty(), "no markdown under {}", root.display());
    let mut blocks = Vec::new();
    for path in files {
        let name = format!("docs/src/{}", path.strip_prefix(&root).unwrap().display());
        let text = std::fs::read_to_string(&path).unwrap();
        blocks.extend(extract(&name, &text).unwrap_or_else(|e| panic!("{e}")));
    }
    blocks
}

/// Checks one block; `Err` says what went wrong.
fn check_block(block: &Block) -> Result<(), String> {
    let sources = [Source {
        name: block.origin.clone(),
        text: block.text.clone(),
    }];
    match &block.expect {
        Expect::Ignore => Ok(()),
        Expect::Compile => {
            let compiled = compile(&sources, &|_, _| None);
            if compiled.diagnostics.is_empty() {
                Ok(())
            } else {
                let found: Vec<String> = compiled
                    .diagnostics
                    .iter()
                    .map(|d| format!("{} {}:{}: {}", d.code, d.line, d.col, d.message))
                    .collect();
                Err(format!("must compile, but: {}", found.join("; ")))
            }
        }
        Expect::Fail(code) => {
            let compiled = compile(&sources, &|_, _| None);
            let only_this = compiled.diagnostics.iter().all(|d| &d.code == code);
            // An error page's example shows its code alone; elsewhere a
            // failing example may trip further codes too.
            let lenient = !block.origin.starts_with("docs/src/errors/");
            if compiled.diagnostics.iter().any(|d| &d.code == code) && (only_this || lenient) {
                Ok(())
            } else {
                let found: Vec<String> = compiled
                    .diagnostics
                    .iter()
                    .map(|d| format!("{} {}", d.code, d.message))
                    .collect();
                Err(format!(
                    "must fail with {code}, but reported [{}]",
                    found.join("; ")
                ))
            }
        }
    }
}

#[test]
fn book_examples_compile_or_fail_as_their_fences_say() {
    let blocks = book_blocks();
    let failures: Vec<String> = blocks
        .iter()
        .filter_map(|b| check_block(b).err().map(|e| format!("{}: {e}", b.origin)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} book examples are wrong:\n{}",
        failures.len(),
        blocks.len(),
        failures.join("\n")
    );
}

#[test]
fn every_code_has_a_failing_example_on_its_page() {
    let blocks = book_blocks();
    for code in CODES {
        let page = format!("docs/src/errors/{}.md:", code.code);
        let fixtures: Vec<&Block> = blocks
            .iter()
            .filter(|b| b.origin.starts_with(&page) && b.expect == Expect::Fail(code.code.into()))
            .collect();
        assert!(
            !fixtures.is_empty(),
            "{} has no compile_fail example",
            code.code
        );
        let fixes = blocks
            .iter()
            .filter(|b| b.origin.starts_with(&page) && b.expect == Expect::Compile)
            .count();
        assert!(fixes > 0, "{} has no example of the fix", code.code);
    }
}

#[test]
fn ignored_fragments_stay_rare() {
    let blocks = book_blocks();
    let ignored = blocks.iter().filter(|b| b.expect == Expect::Ignore).count();
    assert!(
        ignored * 10 <= blocks.len(),
        "{ignored} of {} orbit blocks are `ignore`d; write whole files instead",
        blocks.len()
    );
}

/// The relative link targets (`](path.md)`, `](path.md#anchor)`) of a
/// markdown text, outside code blocks and code spans.
fn relative_links(markdown: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Drop code spans, whose text may look like a link.
        let text: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = &rest[..end];
            let is_url = target.contains("://") || target.starts_with("mailto:");
            if !is_url && !target.starts_with('#') && !target.is_empty() {
                links.push(target.split('#').next().unwrap_or_default().to_string());
            }
            rest = &rest[end..];
        }
    }
    links
}

#[test]
fn relative_links_in_the_book_resolve() {
    let root = docs_src();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    let mut broken = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for target in relative_links(&text) {
            let resolved = path.parent().unwrap().join(&target);
            if !resolved.exists() {
                let page = path.strip_prefix(&root).unwrap().display().to_string();
                broken.push(format!("docs/src/{page}: {target}"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_is_in_the_summary() {
    let root = docs_src();
    let summary = std::fs::read_to_string(root.join("SUMMARY.md")).unwrap();
    let listed = relative_links(&summary);
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    let missing: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .filter(|p| p != "SUMMARY.md" && !listed.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages mdBook will not render (not in SUMMARY.md): {missing:?}"
    );
}

// ---- the extraction itself ----

#[test]
fn extraction_finds_orbit_blocks_with_their_expectations() {
    let md = "# Title\n\ntext\n\n```orbit\nworkflow A version \"1.0.0\" { input { } }\n```\n\n\
              ```rust\nfn main() {}\n```\n\n```orbit,compile_fail,E0400\nbad\n```\n\n\
              ```orbit, ignore\nfragment\n```\n\n````orbit\n```\ninner fence\n````\n";
    let blocks = extract("x.md", md).unwrap();
    assert_eq!(blocks.len(), 4);
    assert_eq!(blocks[0].origin, "x.md:5");
    assert_eq!(blocks[0].expect, Expect::Compile);
    assert_eq!(
        blocks[0].text,
        "workflow A version \"1.0.0\" { input { } }\n"
    );
    assert_eq!(blocks[1].expect, Expect::Fail("E0400".into()));
    assert_eq!(blocks[1].text, "bad\n");
    assert_eq!(blocks[2].expect, Expect::Ignore);
    assert_eq!(blocks[3].text, "```\ninner fence\n");
}

#[test]
fn extraction_rejects_malformed_fences() {
    assert!(extract("x.md", "```orbit\nno end\n").is_err());
    assert!(extract("x.md", "```orbit,compile_fail\nx\n```\n").is_err());
    assert!(extract("x.md", "```orbit,compile_fail,400\nx\n```\n").is_err());
    assert!(extract("x.md", "```orbit,should_panic\nx\n```\n").is_err());
    assert_eq!(extract("x.md", "```\nplain\n```\n").unwrap(), vec![]);
    assert_eq!(extract("x.md", "```orbitx\nplain\n```\n").unwrap(), vec![]);
}

#[test]
fn links_are_found_outside_code() {
    let md = "See [a](a.md), [b](../x/b.md#part), [web](https://e.com), [here](#top).\n\
              `[not](code.md)`\n```\n[not](block.md)\n```\n";
    assert_eq!(relative_links(md), vec!["a.md", "../x/b.md"]);
}

#[test]
fn indented_fences_are_found() {
    let md = "- item\n\n    ```orbit\n    workflow A version \"1.0.0\" { input { } }\n    ```\n";
    let blocks = extract("x.md", md).unwrap();
    assert_eq!(blocks.len(), 1);
    assert!(blocks[0].text.contains("workflow A"));
}

#[test]
fn the_book_has_examples_for_every_error_page() {
    let blocks = book_blocks();
    let pages = blocks
        .iter()
        .filter(|b| b.origin.starts_with("docs/src/errors/"))
        .count();
    assert!(
        pages >= 2 * CODES.len(),
        "only {pages} examples under docs/src/errors"
    );
}

#[test]
fn no_page_is_listed_twice_in_the_summary() {
    // mdBook refuses to build a book whose SUMMARY.md names a file twice.
    let summary = std::fs::read_to_string(docs_src().join("SUMMARY.md")).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let twice: Vec<String> = relative_links(&summary)
        .into_iter()
        .filter(|link| !seen.insert(link.clone()))
        .collect();
    assert!(twice.is_empty(), "listed twice in SUMMARY.md: {twice:?}");
}
