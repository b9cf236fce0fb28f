//! The engine's `IoMode` is the one I/O-mode type of the workspace (server, daemon, bench):
//! its text form parses back, serializes as the same lowercase name, and bad input gets a
//! one-line error listing the modes.

use vodkit_prefetch::IoMode;

const ALL: [(IoMode, &str); 5] = [
    (IoMode::Vanilla, "vanilla"),
    (IoMode::Serialized, "serialized"),
    (IoMode::Prefetch, "prefetch"),
    (IoMode::Asap, "asap"),
    (IoMode::Direct, "direct"),
];

#[test]
fn names_parse_display_and_serialize_alike() {
    for (mode, name) in ALL {
        assert_eq!(name.parse::<IoMode>().unwrap(), mode);
        assert_eq!(mode.to_string(), name);
        assert_eq!(mode.name(), name);
        assert_eq!(serde_json::to_value(mode).unwrap(), name);
        let back: IoMode = serde_json::from_value(serde_json::json!(name)).unwrap();
        assert_eq!(back, mode);
    }
}

#[test]
fn serializing_and_prefetching_modes_follow_seed_table() {
    let serializes: Vec<_> = ALL
        .iter()
        .filter(|(m, _)| m.serializes())
        .map(|p| p.1)
        .collect();
    let prefetches: Vec<_> = ALL
        .iter()
        .filter(|(m, _)| m.prefetches())
        .map(|p| p.1)
        .collect();
    assert_eq!(serializes, ["serialized", "asap", "direct"]);
    assert_eq!(prefetches, ["prefetch", "asap", "direct"]);
}

#[test]
fn unknown_mode_is_a_one_line_error_listing_the_modes() {
    for bad in ["", "ASAP", "turbo", "asap "] {
        let e = bad.parse::<IoMode>().unwrap_err();
        assert!(e.contains(&format!("`{bad}`")), "{e}");
        for (_, name) in ALL {
            assert!(e.contains(name), "{e}");
        }
        assert!(!e.contains('\n'));
    }
}
