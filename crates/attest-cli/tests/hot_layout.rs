//! The hot-code layout's linker script, as `build.rs` makes it for release
//! builds (`build/hot_layout.rs`).

#[path = "../build/hot_layout.rs"]
mod hot_layout;

use hot_layout::linker_script;

#[test]
fn entries_become_input_patterns_of_one_section_inserted_before_the_code() {
    let list = "# comment\n\n_ZN5tokio7runtime4park17h*E\n  sqlite3VdbeExec  \nmain\n";
    insta::assert_snapshot!(linker_script(list).unwrap());
}

#[test]
fn an_entry_that_could_change_the_script_is_refused_with_its_line() {
    for bad in ["a b", "x)", "x(", "x}", "x/*", "x;", "x\"", "x?"] {
        let list = format!("main\n# ok\n{bad}\n");
        let err = linker_script(&list).unwrap_err();
        assert!(err.starts_with("line 3:"), "{bad}: {err}");
    }
}

#[test]
fn a_list_without_entries_is_refused() {
    assert_eq!(linker_script("# only\n\n").unwrap_err(), "no entries");
}

#[test]
fn the_committed_list_makes_a_script() {
    let list = include_str!("../hot-functions.txt");
    let script = linker_script(list).expect("hot-functions.txt is well formed");
    let entries = script.matches("*(.text.").count();
    // A run executes a few thousand of the binary's functions; far fewer
    // means the list was cut short.
    assert!(entries > 1000, "{entries} entries");
    // The entries whose names change between builds are patterns.
    assert!(script.contains("17h*E .text.unlikely."), "{script:.400}");
}
