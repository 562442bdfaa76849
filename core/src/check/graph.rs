//! Dependency graphs: cycles and reachability (steps of a workflow, and
//! workflows through their child steps). Everything here is iterative and
//! linear in the size of the graph (per query), so a hostile definition
//! with many steps cannot exhaust the stack or take quadratic time to check.

use std::collections::{BTreeSet, VecDeque};

/// Strongly connected components (iterative Tarjan), each as its node list.
fn components(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    const UNSEEN: usize = usize::MAX;
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        // (node, position of the next edge to look at)
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut pos)) = work.last_mut() {
            if let Some(&w) = edges[v].get(*pos) {
                *pos += 1;
                if w >= n {
                    continue;
                }
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(component);
            }
        }
    }
    out
}

/// The cycles of the graph, one per strongly connected component that has
/// one, each as a path `[a, b, .., a]` starting at the component's smallest
/// node; ordered by that node (so reports are stable and appear once).
pub(crate) fn cycles(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for component in components(edges) {
        let members: BTreeSet<usize> = component.iter().copied().collect();
        let Some(&start) = members.iter().next() else {
            continue;
        };
        let self_loop = edges[start].contains(&start);
        if members.len() == 1 && !self_loop {
            continue;
        }
        if self_loop {
            out.push(vec![start, start]);
            continue;
        }
        // Shortest path start -> .. -> start inside the component.
        let mut parent = vec![usize::MAX; edges.len()];
        let mut queue = VecDeque::from([start]);
        let mut last = None;
        'search: while let Some(v) = queue.pop_front() {
            for &w in &edges[v] {
                if w == start {
                    last = Some(v);
                    break 'search;
                }
                if members.contains(&w) && parent[w] == usize::MAX {
                    parent[w] = v;
                    queue.push_back(w);
                }
            }
        }
        let Some(mut v) = last else { continue };
        let mut back = Vec::new();
        while v != start {
            back.push(v);
            v = parent[v];
        }
        let mut cycle = vec![start];
        cycle.extend(back.into_iter().rev());
        cycle.push(start);
        out.push(cycle);
    }
    out.sort();
    out
}

/// Whether `to` can be reached from `from` by one or more edges.
pub(crate) fn reaches(edges: &[Vec<usize>], from: usize, to: usize) -> bool {
    let mut seen = vec![false; edges.len()];
    let mut stack = vec![from];
    while let Some(v) = stack.pop() {
        for &w in edges.get(v).map(Vec::as_slice).unwrap_or(&[]) {
            if w == to {
                return true;
            }
            if w < seen.len() && !seen[w] {
                seen[w] = true;
                stack.push(w);
            }
        }
    }
    false
}

/// A topological order (each node after every node it has an edge to,
/// i.e. dependencies first), ties broken by the smallest index; nodes on or
/// behind a cycle come last, in index order.
pub(crate) fn dependencies_first(edges: &[Vec<usize>]) -> Vec<usize> {
    let n = edges.len();
    let mut remaining: Vec<usize> = edges
        .iter()
        .map(|e| e.iter().filter(|&&w| w < n).count())
        .collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, out) in edges.iter().enumerate() {
        for &w in out {
            if w < n {
                dependents[w].push(v);
            }
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&v| remaining[v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    let mut placed = vec![false; n];
    while let Some(v) = ready.pop_first() {
        placed[v] = true;
        order.push(v);
        for &d in &dependents[v] {
            remaining[d] -= 1;
            if remaining[d] == 0 {
                ready.insert(d);
            }
        }
    }
    order.extend((0..n).filter(|&v| !placed[v]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_cycle_once_as_a_path() {
        // 0 -> 1 -> 2 -> 0, 3 -> 3, 4 -> 0
        let edges = vec![vec![1], vec![2], vec![0], vec![3], vec![0]];
        assert_eq!(cycles(&edges), vec![vec![0, 1, 2, 0], vec![3, 3]]);
        assert!(cycles(&[vec![1], vec![]]).is_empty());
    }

    #[test]
    fn reachability_and_order() {
        let edges = vec![vec![], vec![0], vec![1], vec![]];
        assert!(reaches(&edges, 2, 0));
        assert!(!reaches(&edges, 0, 2));
        assert!(!reaches(&edges, 3, 3));
        assert_eq!(dependencies_first(&edges), vec![0, 1, 2, 3]);
        let edges = vec![vec![2], vec![], vec![1], vec![3]];
        assert_eq!(dependencies_first(&edges), vec![1, 2, 0, 3]);
    }

    #[test]
    fn long_chains_are_handled_iteratively() {
        let n = 200_000;
        let edges: Vec<Vec<usize>> = (0..n)
            .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
            .collect();
        assert!(cycles(&edges).is_empty());
        assert!(reaches(&edges, n - 1, 0));
        assert_eq!(dependencies_first(&edges)[n - 1], n - 1);
        let mut ring = edges.clone();
        ring[0] = vec![n - 1];
        assert_eq!(cycles(&ring).len(), 1);
        assert_eq!(cycles(&ring)[0].len(), n + 1);
    }
}
