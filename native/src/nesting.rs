//! Exclusive time (`self_ns`) of `cpu_ops` and `annotations`, for `rank_tables`: each row's
//! duration less the union of the other rows of its table and thread that lie inside it.
//!
//! "Inside": starts at or after the row's start and ends at or before its end. Two rows with the
//! same span: the later one in (name, then file order) is inside the earlier one, never both, so
//! a span recorded twice counts once. Rows that overlap without nesting (a child ending a tick
//! after its parent) are not inside each other; the union is taken over every row inside, at any
//! depth, so the result does not depend on the rows nesting cleanly.
//!
//! Cost: a sort per table, then for each row a look at the rows of its thread that start within
//! it (its descendants, on a trace whose rows nest: the rows times the nesting depth).

use std::cmp::Reverse;
use std::collections::HashMap;

/// One row: its thread (an id of this table's (pid, tid)), span and name's place in byte order.
#[derive(Clone, Copy)]
pub struct Span {
    pub thread: u32,
    pub ts_ns: i64,
    pub end_ns: i64,
    /// the name's position among the table's names in byte order (NULL last)
    pub name_order: u32,
}

/// Ids of values in first-seen order, and each id's place in the values' sorted order.
#[derive(Default)]
pub struct Interner {
    ids: HashMap<String, u32>,
}

impl Interner {
    pub fn id(&mut self, value: &str) -> u32 {
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        let id = self.ids.len() as u32;
        self.ids.insert(value.to_owned(), id);
        id
    }

    /// For each id, its value's position in byte order.
    pub fn order(&self) -> Vec<u32> {
        let mut values: Vec<(&String, u32)> = self.ids.iter().map(|(v, &id)| (v, id)).collect();
        values.sort_unstable();
        let mut order = vec![0; values.len()];
        for (position, (_, id)) in values.into_iter().enumerate() {
            order[id as usize] = position as u32;
        }
        order
    }
}

/// The exclusive time of every row of `spans` (in their order), ns.
pub fn self_times(spans: &[Span]) -> Vec<i64> {
    let mut order: Vec<u32> = (0..spans.len() as u32).collect();
    order.sort_unstable_by_key(|&i| {
        let s = &spans[i as usize];
        (s.thread, s.ts_ns, Reverse(s.end_ns), s.name_order, i)
    });
    let mut out = vec![0i64; spans.len()];
    for (k, &i) in order.iter().enumerate() {
        let outer = spans[i as usize];
        let mut inside = 0i64;
        // the merged run of inner spans being grown (they come in start order)
        let mut run: Option<(i64, i64)> = None;
        for &j in &order[k + 1..] {
            let inner = spans[j as usize];
            if inner.thread != outer.thread || inner.ts_ns > outer.end_ns {
                break;
            }
            if inner.end_ns > outer.end_ns {
                continue;
            }
            run = match run {
                Some((lo, hi)) if inner.ts_ns <= hi => Some((lo, hi.max(inner.end_ns))),
                Some((lo, hi)) => {
                    inside += hi - lo;
                    Some((inner.ts_ns, inner.end_ns))
                }
                None => Some((inner.ts_ns, inner.end_ns)),
            };
        }
        if let Some((lo, hi)) = run {
            inside += hi - lo;
        }
        out[i as usize] = (outer.end_ns - outer.ts_ns - inside).max(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(thread: u32, ts_ns: i64, end_ns: i64, name_order: u32) -> Span {
        Span {
            thread,
            ts_ns,
            end_ns,
            name_order,
        }
    }

    /// The union over every row inside, each thread apart, twins counted once.
    #[test]
    fn exclusive_times() {
        let spans = [
            span(0, 0, 100, 0), // parent: children 10-40 and 30-60 overlap -> union 50, plus 70-80
            span(0, 10, 40, 1), // holds 20-30
            span(0, 30, 60, 1), // overlaps its sibling, not inside it
            span(0, 20, 30, 2), //
            span(0, 70, 80, 2), // twin of the next (same span): the later name is inside
            span(0, 70, 80, 3), //
            span(0, 90, 101, 2), // ends after the parent: not inside it
            span(1, 10, 40, 0), // another thread: inside nothing
        ];
        assert_eq!(self_times(&spans), vec![40, 20, 30, 10, 0, 10, 11, 30]);
    }

    #[test]
    fn names_in_byte_order() {
        let mut names = Interner::default();
        let ids: Vec<u32> = ["b", "a", "B", "b"].iter().map(|n| names.id(n)).collect();
        assert_eq!(ids, vec![0, 1, 2, 0]);
        assert_eq!(names.order(), vec![2, 1, 0]); // B < a < b
    }
}
