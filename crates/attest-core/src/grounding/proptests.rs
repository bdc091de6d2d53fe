//! Properties of the extractor: it never panics, and any value it finds in
//! an answer is grounded by an output that contains the answer's text.

use super::*;
use proptest::prelude::*;

fn source<'a>(output: &'a str, arguments: &'a str) -> Source<'a> {
    Source {
        call_id: "c",
        tool_name: "t",
        output,
        arguments,
        counts: vec![],
    }
}

/// Pieces answers are made of: values of every kind, words, punctuation,
/// odd characters.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}",
        "[0-9]{1,6}",
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
        "v[0-9]\\.[0-9]{1,2}",
        "[0-9a-f]{7,12}",
        "[a-z]{2,6}\\.(com|org|toml|rs)",
        "(src|docs)/[a-z]{1,6}\\.(rs|md)",
        "https://[a-z]{2,6}\\.com/[a-z]{0,4}",
        "port [0-9]{2,5}",
        "[0-9] (hits|files|ms|times)",
        "`[a-z_]{1,10}`",
        "\"[a-zA-Z ]{1,12}\"",
        Just("```".to_string()),
        Just("\n".to_string()),
        "[,.;:!?()\\[\\]*“”é漢\u{200b}]",
        any::<char>().prop_map(String::from),
    ]
}

fn answer() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..24).prop_map(|p| p.join(" "))
}

proptest! {
    #[test]
    fn extraction_and_grounding_never_panic(answer in answer(), output in answer()) {
        let values = checkable_values(&answer);
        let run = vec![TranscriptItem::UserInput { text: output.clone() }];
        let _ = ground(&answer, &Evidence::from_items(&run, &[], vec!["read_file"]));
        let s = source(&output, "");
        let _ = Matcher::new(&values).grounded_by(&values, &s);
    }

    #[test]
    fn any_value_found_in_an_output_is_grounded_by_it(answer in answer()) {
        // The output holds the answer verbatim: every value is in it.
        let output = format!("result:\n{answer}\n");
        let values = checkable_values(&answer);
        let s = source(&output, "{}");
        let grounded = Matcher::new(&values).grounded_by(&values, &s);
        prop_assert_eq!(grounded.len(), values.len(), "{:?}", values);
        for c in &values {
            prop_assert!(found_in(c, &output), "{:?} not found", c);
        }
        // And nothing is grounded by a call whose own arguments carry it.
        let echoed = source(&output, &output);
        prop_assert!(Matcher::new(&values).grounded_by(&values, &echoed).is_empty());
    }
}
