//! Dependency graphs: reachability and cycles (steps of a workflow, and
//! workflows through their child steps).

use std::collections::BTreeSet;

/// `reach[i]`: every node reachable from `i` by one or more edges.
pub(crate) fn reachability(edges: &[Vec<usize>]) -> Vec<BTreeSet<usize>> {
    let n = edges.len();
    let mut reach = vec![BTreeSet::new(); n];
    for (start, out) in reach.iter_mut().enumerate() {
        let mut stack: Vec<usize> = edges[start].clone();
        while let Some(v) = stack.pop() {
            if v < n && out.insert(v) {
                stack.extend(edges[v].iter().copied());
            }
        }
    }
    reach
}

/// The cycles of the graph, one per strongly connected component that has
/// one, each as a path `[a, b, .., a]` starting at the component's smallest
/// node (so reports are stable and appear once).
pub(crate) fn cycles(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let reach = reachability(edges);
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for i in 0..edges.len() {
        if done.contains(&i) || !reach[i].contains(&i) {
            continue;
        }
        let component: BTreeSet<usize> = (0..edges.len())
            .filter(|j| *j == i || (reach[i].contains(j) && reach[*j].contains(&i)))
            .collect();
        done.extend(component.iter().copied());
        // Breadth-first search from i back to i inside the component.
        let mut parent = vec![usize::MAX; edges.len()];
        let mut queue = std::collections::VecDeque::new();
        let mut found = None;
        for &w in &edges[i] {
            if w == i {
                found = Some(i);
                break;
            }
            if component.contains(&w) && parent[w] == usize::MAX {
                parent[w] = i;
                queue.push_back(w);
            }
        }
        while found.is_none() {
            let Some(v) = queue.pop_front() else { break };
            for &w in &edges[v] {
                if w == i {
                    found = Some(v);
                    break;
                }
                if component.contains(&w) && parent[w] == usize::MAX {
                    parent[w] = v;
                    queue.push_back(w);
                }
            }
        }
        let Some(last) = found else { continue };
        let mut path = vec![i];
        let mut v = last;
        while v != i {
            path.push(v);
            v = parent[v];
        }
        path.push(i);
        // path is i, last, .., first-after-i, i reversed in the middle.
        let inner: Vec<usize> = path[1..path.len() - 1].iter().rev().copied().collect();
        let mut cycle = vec![i];
        cycle.extend(inner);
        cycle.push(i);
        out.push(cycle);
    }
    out
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
}
