//! Exclusive time (`self_ns`) of `cpu_ops` and `annotations`, for `rank_tables`: each row's
//! duration less the union of the other rows of its table and thread that lie inside it.
//!
//! "Inside": starts at or after the row's start and ends at or before its end. Two rows with the
//! same span: the later one in (name, External id, sequence number, then the rest of the row's
//! content) is inside the earlier one, never both, so a span recorded twice counts once, and which
//! copy holds the time never depends on the order of the rows in the file. Rows that overlap without nesting (a child ending a tick
//! after its parent) are not inside each other; the union is taken over every row inside, at any
//! depth, so the result does not depend on the rows nesting cleanly.
//!
//! Cost: a sort per table, then each row looks at the rows of its thread that start within it,
//! jumping over what lies inside each one it takes: on rows that nest, each row is looked at
//! from its parent only (linear). Rows overlapping the end of a row are stepped over one by
//! one, so only many rows overlapping one another without nesting cost more.

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
    pub external_id: Option<i64>,
    pub seq_number: Option<i64>,
    /// among rows equal in all the above: the row's place by the rest of its content (`tie_runs`)
    pub content: u32,
}

/// (thread, start, end reversed, name, External id NULL?, External id, sequence NULL?, sequence)
type Key = (
    u32,
    i64,
    Reverse<i64>,
    u32,
    bool,
    Option<i64>,
    bool,
    Option<i64>,
);

impl Span {
    /// Everything but `content` that orders two rows of one start (NULLs last).
    fn key(&self) -> Key {
        (
            self.thread,
            self.ts_ns,
            Reverse(self.end_ns),
            self.name_order,
            self.external_id.is_none(),
            self.external_id,
            self.seq_number.is_none(),
            self.seq_number,
        )
    }
}

/// The rows in the order `self_times` reads them: by key, then (`content`) by the rest of their
/// content; sorted once.
pub struct Ordered {
    order: Vec<u32>,
    /// the runs of two or more rows (ranges of `order`) that no key but their content tells apart
    ties: Vec<std::ops::Range<usize>>,
}

impl Ordered {
    /// `spans` sorted by key (rows of one key in their index order, until `self_times` places
    /// them by `content`).
    pub fn of(spans: &[Span]) -> Ordered {
        let mut order: Vec<u32> = (0..spans.len() as u32).collect();
        order.sort_unstable_by_key(|&i| (spans[i as usize].key(), i));
        let mut ties = Vec::new();
        let mut first = 0;
        while first < order.len() {
            let key = spans[order[first] as usize].key();
            let mut end = first + 1;
            while end < order.len() && spans[order[end] as usize].key() == key {
                end += 1;
            }
            if end - first > 1 {
                ties.push(first..end);
            }
            first = end;
        }
        Ordered { order, ties }
    }

    /// The rows (indices into `spans`) only their content tells apart, a run at a time: the
    /// caller gives each its `content` place.
    pub fn tie_runs(&self) -> impl Iterator<Item = &[u32]> {
        self.ties.iter().map(|r| &self.order[r.clone()])
    }
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
    self_times_in(spans, Ordered::of(spans))
}

/// `self_times` over rows sorted already (`Ordered::of`, their `content` places given since).
pub fn self_times_in(spans: &[Span], ordered: Ordered) -> Vec<i64> {
    let Ordered { mut order, ties } = ordered;
    for run in ties {
        order[run].sort_unstable_by_key(|&i| (spans[i as usize].content, i));
    }
    let at = |k: usize| spans[order[k] as usize];
    // `b` (after `a` in the order) lies inside `a`
    let inside =
        |a: &Span, b: &Span| b.thread == a.thread && b.end_ns <= a.end_ns && b.ts_ns <= a.end_ns;
    // past[k]: the first position after k whose row is not inside row k; every row between lies
    // inside it, so a union that holds row k can jump there (a tree of rows is then read once
    // per parent, not once per ancestor). Built from the end: a row inside k passes on its own.
    let mut past = vec![0usize; order.len()];
    for k in (0..order.len()).rev() {
        let outer = at(k);
        let mut next = k + 1;
        while next < order.len() && inside(&outer, &at(next)) {
            next = past[next];
        }
        past[k] = next;
    }
    let mut out = vec![0i64; spans.len()];
    for k in 0..order.len() {
        let outer = at(k);
        let mut covered = 0i64;
        // the merged run of inner spans being grown (they come in start order)
        let mut run: Option<(i64, i64)> = None;
        let mut next = k + 1;
        while next < order.len() {
            let inner = at(next);
            if inner.thread != outer.thread || inner.ts_ns > outer.end_ns {
                break;
            }
            if inner.end_ns > outer.end_ns {
                next += 1; // (overlaps the end: what lies inside it may still lie inside `outer`)
                continue;
            }
            run = match run {
                Some((lo, hi)) if inner.ts_ns <= hi => Some((lo, hi.max(inner.end_ns))),
                Some((lo, hi)) => {
                    covered += hi - lo;
                    Some((inner.ts_ns, inner.end_ns))
                }
                None => Some((inner.ts_ns, inner.end_ns)),
            };
            next = past[next];
        }
        if let Some((lo, hi)) = run {
            covered += hi - lo;
        }
        out[order[k] as usize] = (outer.end_ns - outer.ts_ns - covered).max(0);
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
            external_id: None,
            seq_number: None,
            content: 0,
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

    /// Every pair looked at: the rule as the module states it.
    fn naive(spans: &[Span]) -> Vec<i64> {
        let key = |i: usize| {
            let s = &spans[i];
            (
                s.name_order,
                s.external_id.is_none(),
                s.external_id,
                s.content,
                i,
            )
        };
        (0..spans.len())
            .map(|i| {
                let a = spans[i];
                let mut inner: Vec<(i64, i64)> = (0..spans.len())
                    .filter(|&j| {
                        let b = spans[j];
                        j != i
                            && b.thread == a.thread
                            && b.ts_ns >= a.ts_ns
                            && b.end_ns <= a.end_ns
                            && (b.ts_ns > a.ts_ns || b.end_ns < a.end_ns || key(j) > key(i))
                    })
                    .map(|j| (spans[j].ts_ns, spans[j].end_ns))
                    .collect();
                inner.sort();
                let (mut covered, mut reach) = (0, i64::MIN);
                for (lo, hi) in inner {
                    if hi > reach {
                        covered += hi - lo.max(reach);
                        reach = hi;
                    }
                }
                a.end_ns - a.ts_ns - covered
            })
            .collect()
    }

    /// Random rows (short spans on few threads and names: much nesting, overlap and twins)
    /// give what every pair looked at gives; so do a deep chain and a wide tree.
    #[test]
    fn the_jumps_give_what_every_pair_gives() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as i64
        };
        for round in 0..300 {
            let n = 1 + next(40) as usize;
            let spans: Vec<Span> = (0..n)
                .map(|_| {
                    let ts = next(60);
                    span(
                        next(2) as u32,
                        ts,
                        ts + next(if round % 2 == 0 { 8 } else { 60 }),
                        next(3) as u32,
                    )
                })
                .collect();
            assert_eq!(self_times(&spans), naive(&spans), "{round}");
        }
        let chain: Vec<Span> = (0..2000).map(|i| span(0, i, 10_000 - i, 0)).collect();
        let got = self_times(&chain);
        assert_eq!(got, naive(&chain));
        assert_eq!(got[0], 2); // [0, 10000] less [1, 9999]
        let tree: Vec<Span> = std::iter::once(span(0, 0, 10_000, 0))
            .chain((0..2000).map(|i| span(0, 5 * i, 5 * i + 3, 1)))
            .collect();
        assert_eq!(self_times(&tree), naive(&tree));
    }

    #[test]
    fn names_in_byte_order() {
        let mut names = Interner::default();
        let ids: Vec<u32> = ["b", "a", "B", "b"].iter().map(|n| names.id(n)).collect();
        assert_eq!(ids, vec![0, 1, 2, 0]);
        assert_eq!(names.order(), vec![2, 1, 0]); // B < a < b
    }
}
