//! Perfetto protobuf built by hand (field numbers of perfetto_trace.proto) -> rows.

use super::*;
use arrow_array::{Array, Int64Array, StringArray};
use prost::encoding::{encode_key, encode_varint, WireType};
use std::io::Write;

fn varint(n: u32, v: u64, out: &mut Vec<u8>) {
    encode_key(n, WireType::Varint, out);
    encode_varint(v, out);
}

fn bytes(n: u32, b: &[u8], out: &mut Vec<u8>) {
    encode_key(n, WireType::LengthDelimited, out);
    encode_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn msg(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    out
}

/// A Trace entry: `packet = 1`.
fn frame(packet: &[u8]) -> Vec<u8> {
    msg(|o| bytes(1, packet, o))
}

fn thread_track(uuid: u64, pid: u64, tid: u64, name: Option<&str>) -> Vec<u8> {
    frame(&msg(|p| {
        bytes(
            60,
            &msg(|d| {
                varint(1, uuid, d);
                bytes(
                    4,
                    &msg(|t| {
                        varint(1, pid, t);
                        varint(2, tid, t);
                        if let Some(n) = name {
                            bytes(5, n.as_bytes(), t);
                        }
                    }),
                    d,
                );
            }),
            p,
        );
    }))
}

/// A track event packet on sequence 1: (timestamp, the TrackEvent's fields, interned data).
fn event(ts: u64, te: impl FnOnce(&mut Vec<u8>), interned: Option<Vec<u8>>, flags: u64) -> Vec<u8> {
    frame(&msg(|p| {
        varint(8, ts, p);
        varint(10, 1, p);
        if flags != 0 {
            varint(13, flags, p);
        }
        if let Some(i) = interned {
            bytes(12, &i, p);
        }
        bytes(11, &msg(te), p);
    }))
}

fn interned_name(table: u32, iid: u64, name: &str) -> Vec<u8> {
    msg(|i| {
        bytes(
            table,
            &msg(|e| {
                varint(1, iid, e);
                bytes(2, name.as_bytes(), e);
            }),
            i,
        )
    })
}

struct Tmp(std::path::PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn file(data: &[u8], tag: &str) -> Tmp {
    let path = std::env::temp_dir().join(format!(
        "traceanalyze-pftrace-test-{}-{tag}.pftrace",
        std::process::id()
    ));
    std::fs::File::create(&path)
        .unwrap()
        .write_all(data)
        .unwrap();
    Tmp(path)
}

/// A row's values as text (None: NULL), in column order.
type Rows = Vec<Vec<Option<String>>>;

fn read(data: &[u8], tag: &str) -> Result<(Rows, Outcome), TraceError> {
    let f = file(data, tag);
    let limits = Limits {
        block_bytes: 4096,
        ..Limits::default()
    };
    let (batches, outcome) = read_all(&f.0, limits)?;
    let names: Vec<&str> = crate::columns::COLUMNS.iter().map(|c| c.0).collect();
    let mut rows = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let row = names
                .iter()
                .map(|n| {
                    let c = b.column_by_name(n).unwrap();
                    if c.is_null(r) {
                        return None;
                    }
                    if let Some(s) = c.as_any().downcast_ref::<StringArray>() {
                        Some(s.value(r).to_string())
                    } else if let Some(i) = c.as_any().downcast_ref::<Int64Array>() {
                        Some(i.value(r).to_string())
                    } else {
                        let i = c
                            .as_any()
                            .downcast_ref::<arrow_array::Int32Array>()
                            .unwrap();
                        Some(i.value(r).to_string())
                    }
                })
                .collect();
            rows.push(row);
        }
    }
    Ok((rows, outcome))
}

fn col(name: &str) -> usize {
    crate::columns::COLUMNS
        .iter()
        .position(|c| c.0 == name)
        .unwrap()
}

fn get<'a>(row: &'a [Option<String>], name: &str) -> Option<&'a str> {
    row[col(name)].as_deref()
}

fn note(o: &Outcome, kind: &str) -> Option<Option<u64>> {
    o.notes.iter().find(|n| n.0 == kind).map(|n| n.2)
}

#[test]
fn slices_instants_flows_and_counters() {
    let mut data = thread_track(5, 10, 11, Some("main"));
    // a counter track under the thread track, named after its series
    data.extend(frame(&msg(|p| {
        bytes(
            60,
            &msg(|d| {
                varint(1, 6, d);
                varint(5, 5, d);
                bytes(2, b"MB", d);
                bytes(8, &[], d);
            }),
            p,
        )
    })));
    let names = [
        interned_name(2, 1, "step"),
        interned_name(1, 1, "user_annotation"),
    ]
    .concat();
    data.extend(event(
        1_000,
        |t| {
            varint(9, 1, t);
            varint(11, 5, t);
            varint(10, 1, t);
            varint(3, 1, t);
            encode_key(47, WireType::SixtyFourBit, t);
            t.extend(77u64.to_le_bytes());
        },
        Some(names),
        1,
    ));
    data.extend(event(
        1_500,
        |t| {
            varint(9, 3, t);
            varint(11, 5, t);
            bytes(23, b"mark", t);
        },
        None,
        0,
    ));
    data.extend(event(
        1_600,
        |t| {
            varint(9, 4, t);
            varint(11, 6, t);
            varint(30, 12, t);
        },
        None,
        0,
    ));
    data.extend(event(
        3_000,
        |t| {
            varint(9, 2, t);
            varint(11, 5, t);
        },
        None,
        0,
    ));
    let (rows, o) = read(&data, "slices").unwrap();
    let summary: Vec<_> = rows
        .iter()
        .map(|r| {
            [
                "ph",
                "cat",
                "name",
                "pid",
                "tid",
                "ts_ns",
                "dur_ns",
                "flow_id",
                "other_args",
                "label",
            ]
            .map(|c| get(r, c).map(str::to_string))
        })
        .collect();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        summary,
        vec![
            [
                s("M"),
                None,
                s("thread_name"),
                s("10"),
                s("11"),
                None,
                None,
                None,
                None,
                s("main")
            ],
            [
                s("s"),
                s("ac2g"),
                s("ac2g"),
                s("10"),
                s("11"),
                s("1000"),
                None,
                s("77"),
                None,
                None
            ],
            [
                s("i"),
                None,
                s("mark"),
                s("10"),
                s("11"),
                s("1500"),
                None,
                None,
                None,
                None
            ],
            [
                s("C"),
                None,
                s("MB"),
                s("10"),
                s("11"),
                s("1600"),
                None,
                None,
                s(r#"{"MB":12}"#),
                None
            ],
            [
                s("X"),
                s("user_annotation"),
                s("step"),
                s("10"),
                s("11"),
                s("1000"),
                s("2000"),
                None,
                None,
                None
            ],
        ]
    );
    assert_eq!(o.events, 5);
    assert!(o.notes.is_empty(), "{:?}", o.notes);
    assert_eq!(o.events_bytes, data.len() as u64);
    assert_eq!(o.truncated_at_byte, None);
}

#[test]
fn interning_cleared_and_unknown_ids() {
    let mut data = thread_track(5, 1, 2, None);
    data.extend(event(
        10,
        |t| {
            varint(9, 3, t);
            varint(11, 5, t);
            varint(10, 1, t);
        },
        Some(interned_name(2, 1, "first")),
        1,
    ));
    // the state is cleared: iid 1 is unknown until sent again
    data.extend(event(
        20,
        |t| {
            varint(9, 3, t);
            varint(11, 5, t);
            varint(10, 1, t);
        },
        None,
        1,
    ));
    let (rows, o) = read(&data, "interning").unwrap();
    let names: Vec<_> = rows.iter().map(|r| get(r, "name")).collect();
    assert_eq!(names, vec![Some("first"), None]);
    assert_eq!(note(&o, "unknown-interned"), Some(Some(1)));
}

#[test]
fn debug_annotations_are_typed_args_and_other_args() {
    let mut data = thread_track(5, 1, 2, None);
    let ann = |name: &str, value: &dyn Fn(&mut Vec<u8>)| {
        msg(|a| {
            bytes(10, name.as_bytes(), a);
            value(a);
        })
    };
    data.extend(event(
        10,
        |t| {
            varint(9, 3, t);
            varint(11, 5, t);
            bytes(4, &ann("External id", &|a| varint(4, 7, a)), t);
            bytes(
                4,
                &ann("Device Type", &|a| {
                    encode_key(5, WireType::SixtyFourBit, a);
                    a.extend(1.0f64.to_bits().to_le_bytes());
                }),
                t,
            );
            bytes(4, &ann("device", &|a| bytes(6, b"oops", a)), t);
            bytes(4, &ann("Bytes", &|a| varint(4, (-64i64) as u64, a)), t);
            bytes(4, &ann("stage", &|a| bytes(6, b"fwd", a)), t);
        },
        None,
        0,
    ));
    let (rows, o) = read(&data, "args").unwrap();
    let r = &rows[0];
    assert_eq!(get(r, "external_id"), Some("7"));
    assert_eq!(get(r, "device_type"), Some("1"));
    assert_eq!(get(r, "device"), None);
    assert_eq!(get(r, "bytes"), Some("-64"));
    assert_eq!(get(r, "other_args"), Some(r#"{"stage":"fwd"}"#));
    assert_eq!(o.tally.bad_args[2], 1); // "device": text that is not an integer
}

#[test]
fn a_track_described_after_its_events() {
    let mut data = event(
        10,
        |t| {
            varint(9, 3, t);
            varint(11, 9, t);
            bytes(23, b"early", t);
        },
        None,
        0,
    );
    data.extend(thread_track(9, 3, 4, None));
    let (rows, _) = read(&data, "late-track").unwrap();
    assert_eq!(get(&rows[0], "pid"), Some("3"));
    assert_eq!(get(&rows[0], "tid"), Some("4"));
}

#[test]
fn cut_and_damaged_streams() {
    let good = [
        thread_track(5, 1, 2, None),
        event(
            10,
            |t| {
                varint(9, 3, t);
                varint(11, 5, t);
            },
            None,
            0,
        ),
    ]
    .concat();
    // cut inside the second packet: the first is kept, the rest counted as lost
    let first = thread_track(5, 1, 2, None).len();
    let (rows, o) = read(&good[..good.len() - 2], "cut").unwrap();
    assert!(rows.is_empty()); // (the event was in the cut packet; the descriptor has no M rows)
    assert_eq!(o.truncated_at_byte, Some(first as u64));
    assert_eq!(o.lost_bytes, (good.len() - 2 - first) as u64);
    // a corrupt header after good packets: a note; as the first packet: the file's error
    let mut damaged = good.clone();
    damaged.extend([0x12, 0x01, 0x00]);
    let (rows, o) = read(&damaged, "damaged").unwrap();
    assert_eq!(rows.len(), 1);
    assert!(o
        .notes
        .iter()
        .any(|n| n.0 == "damaged" && n.1.contains("field tag 18")));
    let e = read(b"{\"traceEvents\": []}", "json").unwrap_err();
    assert_eq!(
        e.message,
        "not a Perfetto protobuf trace (field tag 123 where a packet should start at byte 0)"
    );
    // a packet whose bytes are not a TracePacket is skipped and counted
    let mut bad = good.clone();
    bad.extend(frame(&[0x5a, 0x7f, 0x01]));
    let (rows, o) = read(&bad, "bad-packet").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(note(&o, "bad-packets"), Some(Some(1)));
}

#[test]
fn compressed_packets_and_their_bound() {
    let inner = [
        thread_track(5, 1, 2, None),
        event(
            10,
            |t| {
                varint(9, 3, t);
                varint(11, 5, t);
                bytes(23, b"inside", t);
            },
            None,
            0,
        ),
    ]
    .concat();
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&inner).unwrap();
    let data = frame(&msg(|p| bytes(50, &z.finish().unwrap(), p)));
    let (rows, o) = read(&data, "compressed").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(get(&rows[0], "name"), Some("inside"));
    assert!(o.notes.is_empty());
    // 80 MiB of zeros: beyond one chunk's bound
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    for _ in 0..80 {
        z.write_all(&vec![0u8; 1 << 20]).unwrap();
    }
    let bomb = [
        data.clone(),
        frame(&msg(|p| bytes(50, &z.finish().unwrap(), p))),
    ]
    .concat();
    let e = read(&bomb, "bomb").unwrap_err();
    assert!(e.message.contains("zip bomb"), "{}", e.message);
}

#[test]
fn head_metadata_of_the_first_packets() {
    let meta = frame(&msg(|p| {
        bytes(
            5,
            &msg(|c| {
                bytes(
                    2,
                    &msg(|m| {
                        bytes(1, b"distributedInfo", m);
                        bytes(5, br#"{"rank": 3}"#, m);
                    }),
                    c,
                );
                bytes(
                    2,
                    &msg(|m| {
                        bytes(1, b"note", m);
                        bytes(2, b"a \"quoted\" text", m);
                    }),
                    c,
                );
            }),
            p,
        )
    }));
    let got = head_metadata(&[thread_track(5, 1, 2, None), meta].concat()).unwrap();
    assert_eq!(
        got,
        vec![
            ("distributedInfo".to_string(), r#"{"rank": 3}"#.to_string()),
            ("note".to_string(), r#""a \"quoted\" text""#.to_string()),
        ]
    );
    assert_eq!(head_metadata(&thread_track(5, 1, 2, None)), None);
}

#[test]
fn mutated_bytes_read_or_fail_in_one_line() {
    // (a deterministic stand-in for the fuzz target: flips, cuts and insertions of a small
    // trace with nested annotations, interning and a compressed chunk)
    let ann = msg(|a| {
        bytes(10, b"dims", a);
        bytes(12, &msg(|e| varint(4, 3, e)), a);
        bytes(12, &msg(|e| bytes(9, b"{\"k\": [1, 2.50]}", e)), a);
    });
    let base = [
        thread_track(5, 1, 2, Some("t")),
        event(
            10,
            |t| {
                varint(9, 1, t);
                varint(11, 5, t);
                varint(10, 1, t);
                bytes(4, &ann, t);
            },
            Some(interned_name(2, 1, "op")),
            1,
        ),
        event(
            20,
            |t| {
                varint(9, 2, t);
                varint(11, 5, t);
            },
            None,
            0,
        ),
    ]
    .concat();
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&base).unwrap();
    let base = [
        base.clone(),
        frame(&msg(|p| bytes(50, &z.finish().unwrap(), p))),
    ]
    .concat();
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for case in 0..300 {
        let mut data = base.clone();
        for _ in 0..1 + next(4) {
            let at = next(data.len());
            match next(3) {
                0 => data[at] = next(256) as u8,
                1 => data.truncate(at.max(1)),
                _ => data.insert(at, next(256) as u8),
            }
        }
        let _ = head_metadata(&data);
        match read(&data, &format!("mutated-{case}")) {
            Ok((rows, o)) => {
                assert_eq!(rows.len() as u64, o.events);
                assert!(o.events_bytes + o.lost_bytes <= data.len() as u64);
            }
            Err(e) => assert!(!e.message.is_empty() && !e.message.contains('\n')),
        }
    }
}
