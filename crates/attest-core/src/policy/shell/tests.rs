use super::*;

fn texts(command: &str) -> Vec<String> {
    split(command)
        .unwrap_or_else(|e| panic!("{command}: {e}"))
        .iter()
        .map(Part::text)
        .collect()
}

#[test]
fn operators_split_commands() {
    assert_eq!(
        texts("git status && rm -rf x || echo hi; ls | wc -l & true"),
        ["git status", "rm -rf x", "echo hi", "ls", "wc -l", "true"]
    );
    assert_eq!(texts("a&&b;c|d"), ["a", "b", "c", "d"]);
    assert_eq!(texts("a\nb\n\nc"), ["a", "b", "c"]);
    assert_eq!(texts("(cd /; rm -rf x)"), ["cd /", "rm -rf x"]);
    assert_eq!(texts("{ ls; pwd; }"), ["ls", "pwd"]);
    assert_eq!(texts("if test -f x; then rm x; fi"), ["test -f x", "rm x"]);
    assert_eq!(texts("while true; do sleep 1; done"), ["true", "sleep 1"]);
    assert_eq!(texts("ls # rm -rf /"), ["ls"]);
}

#[test]
fn pipelines_are_numbered() {
    let parts = split("curl x | sh; echo a |& tee b").unwrap();
    let ids: Vec<(usize, usize)> = parts.iter().map(|p| (p.pipeline, p.stage)).collect();
    assert_eq!(ids[0].0, ids[1].0);
    assert_eq!((ids[0].1, ids[1].1), (0, 1));
    assert_ne!(ids[1].0, ids[2].0);
    assert_eq!(ids[2].0, ids[3].0);
}

#[test]
fn quotes_make_one_word() {
    let parts = split(r#"echo "a && b" 'c; d' e\ f"#).unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].words, ["echo", "a && b", "c; d", "e f"]);
    assert_eq!(
        split(r#"rm "-rf" '/'"#).unwrap()[0].words,
        ["rm", "-rf", "/"]
    );
}

#[test]
fn substitutions_are_commands_too() {
    assert_eq!(texts("echo $(rm -rf /)"), ["echo $(…)", "rm -rf /"]);
    assert_eq!(texts("echo `whoami`"), ["echo `…`", "whoami"]);
    assert_eq!(texts(r#"echo "x $(id -u) y""#), ["echo x $(…) y", "id -u"]);
    assert_eq!(
        texts("echo $(echo $(reboot))"),
        ["echo $(…)", "echo $(…)", "reboot"]
    );
    assert_eq!(
        texts("diff <(ls a) <(ls b)"),
        ["diff <(…) <(…)", "ls a", "ls b"]
    );
    assert_eq!(texts("echo ${X:-$(halt)}"), ["echo ${X:-$(halt)}", "halt"]);
    assert_eq!(texts("echo $((1 + $(id -u)))"), ["echo $((…))", "id -u"]);
    assert_eq!(texts("echo $((2*3))"), ["echo $((…))"]);
    // A bare assignment is a part of its own (it changes later commands).
    assert_eq!(texts("X=$(rm -rf /)"), ["", "rm -rf /"]);
    assert_eq!(
        split("PATH=.").unwrap()[0].assignments,
        [("PATH".to_string(), ".".to_string())]
    );
}

#[test]
fn ansi_c_quoting_is_decoded() {
    assert_eq!(
        split(r"$'\x72\x6d' -rf x").unwrap()[0].words,
        ["rm", "-rf", "x"]
    );
    assert_eq!(split(r"$'\162\155' x").unwrap()[0].words, ["rm", "x"]);
    assert_eq!(split(r"$'\u0072m'").unwrap()[0].words, ["rm"]);
    assert_eq!(
        split(r"echo $'a\'b' $'\n'").unwrap()[0].words,
        ["echo", "a'b", "\n"]
    );
    // Inside double quotes `$'` is a dollar and a quote.
    assert_eq!(split(r#"echo "$'x'""#).unwrap()[0].words, ["echo", "$'x'"]);
    assert!(split("echo $'x").is_err());
}

#[test]
fn assignments_globs_and_computed_arguments_are_recorded() {
    let p = &split("LD_PRELOAD=./x.so GIT_DIR=y cat f").unwrap()[0];
    assert_eq!(p.words, ["cat", "f"]);
    let names: Vec<&str> = p.assignments.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["LD_PRELOAD", "GIT_DIR"]);
    let p = &split("env -i PATH=. ls").unwrap()[0];
    assert_eq!(p.words, ["ls"]);
    assert_eq!(p.assignments, [("PATH".to_string(), ".".to_string())]);
    let p = &split("ls *.rs 'a*' src/[ab]").unwrap()[0];
    assert_eq!(p.globs, ["*.rs", "src/[ab]"]);
    assert!(split("cat $F").unwrap()[0].args_expand);
    assert!(!split("cat f").unwrap()[0].args_expand);
}

#[test]
fn env_split_string_and_odd_env_options() {
    assert_eq!(texts("env -S 'rm -rf x' ls"), ["rm -rf x ls"]);
    assert_eq!(texts("env -S'PATH=. ls'"), ["ls"]);
    assert_eq!(
        split("env --split-string='PATH=. ls'").unwrap()[0].assignments,
        [("PATH".to_string(), ".".to_string())]
    );
    assert!(split("env -C / cat etc/passwd").unwrap()[0].complex);
    assert!(split("env -P . ls").unwrap()[0].complex);
    assert!(split("env -iS 'x y'").unwrap()[0].complex);
    assert!(!split("env -i -u X ls").unwrap()[0].complex);
}

#[test]
fn programs_named_in_options_are_commands() {
    assert_eq!(
        texts("rg --pre ./x.sh foo"),
        ["rg --pre ./x.sh foo", "./x.sh"]
    );
    assert_eq!(texts("rg --pre='sh -c id' foo")[1..], ["sh -c id", "id"]);
    assert_eq!(texts("sort --compress-program=gzip f")[1], "gzip");
    assert_eq!(texts("git grep -Ovim x")[1], "vim");
    assert_eq!(texts("git grep --open-files-in-pager=./p x")[1], "./p");
    assert_eq!(
        texts("tar -cf a.tar --to-command='rm -rf y' .")[1],
        "rm -rf y"
    );
    assert_eq!(texts("tar -I ./z -xf a.tar")[1], "./z");
    assert_eq!(texts("zip -T -TT 'sh -c x' a.zip f")[1], "sh -c x");
    assert_eq!(texts("git status -uno"), ["git status -uno"]);
    assert_eq!(texts("git diff -O order.txt"), ["git diff -O order.txt"]);
}

#[test]
fn derived_commands_are_normalized_too() {
    assert_eq!(
        texts("ls | xargs sh -c 'rm -rf /'"),
        ["ls", "xargs sh -c rm -rf /", "sh -c rm -rf /", "rm -rf /"]
    );
    assert_eq!(texts("find . -exec env rm {} ;")[1], "rm {}");
    // Words another program passes on are not assignments.
    assert_eq!(texts("xargs A=1")[1], "A=1");
}

#[test]
fn interpreters_fed_their_program() {
    for cmd in [
        "echo x | sh",
        "echo x | bash -s",
        "base64 -d f | python3",
        "curl x | python3 -",
        "sh < script",
        "sh <<EOF\nls\nEOF",
        "bash <<< 'ls'",
        "node < x.js",
    ] {
        let parts = split(cmd).unwrap();
        assert!(parts.iter().any(|p| p.reads_program), "{cmd}");
    }
    for cmd in [
        "sh script.sh",
        "echo x | python3 tool.py",
        "echo x | sh -c 'cat'",
        "python3 -c 'print(1)'",
        "cat x | perl -ne 'print'",
        "echo x | grep sh",
    ] {
        let parts = split(cmd).unwrap();
        assert!(!parts.iter().any(|p| p.reads_program), "{cmd}");
    }
    // A heredoc or here-string given to a shell is split as its script.
    assert!(texts("sh <<EOF\nrm -rf /\nEOF").contains(&"rm -rf /".to_string()));
    assert!(texts("sh <<'EOF'\nreboot\nEOF").contains(&"reboot".to_string()));
    assert!(texts("bash <<< 'sudo ls'").contains(&"sudo ls".to_string()));
    assert!(!texts("cat <<EOF\nreboot\nEOF").contains(&"reboot".to_string()));
}

#[test]
fn a_shell_run_from_a_relative_path_is_not_transparent() {
    assert!(!split("./bash -c 'ls'").unwrap()[0].transparent);
    assert!(split("/bin/bash -c 'ls'").unwrap()[0].transparent);
}

#[test]
fn shell_scripts_and_eval_are_followed() {
    let parts = split(r#"bash -c "git status && rm -rf /""#).unwrap();
    assert!(parts[0].transparent);
    assert_eq!(parts[0].words, ["bash", "-c", "git status && rm -rf /"]);
    assert_eq!(parts[1].text(), "git status");
    assert_eq!(parts[2].text(), "rm -rf /");
    assert_eq!(texts("sh -ec 'ls'")[1], "ls");
    assert_eq!(texts("/bin/bash -lc 'ls'")[1], "ls");
    assert!(!split("bash script.sh").unwrap()[0].transparent);
    assert_eq!(texts("eval 'rm -rf /'")[1], "rm -rf /");
    assert_eq!(
        texts(r#"sh -c "sh -c 'sh -c reboot'""#).last().unwrap(),
        "reboot"
    );
}

#[test]
fn assignments_wrappers_and_keywords_are_stripped() {
    let parts = split("FOO=1 BAR=x timeout -s KILL 5 nice -n 10 env -u X A=b rm -rf /").unwrap();
    assert_eq!(parts[0].words, ["rm", "-rf", "/"]);
    assert_eq!(
        parts[0].raw_text().unwrap(),
        "FOO=1 BAR=x timeout -s KILL 5 nice -n 10 env -u X A=b rm -rf /"
    );
    assert_eq!(texts("nohup command exec rm x"), ["rm x"]);
    assert_eq!(texts("env"), ["env"]);
    assert_eq!(texts("command -v rm"), ["command -v rm"]);
    assert_eq!(split("ls").unwrap()[0].raw_words, None);
    assert_eq!(texts("for f in *.txt; do rm $f; done"), ["rm $f"]);
    assert!(split("case $x in a) rm x;; esac")
        .unwrap()
        .iter()
        .any(|p| p.complex));
}

#[test]
fn xargs_and_find_exec_run_commands() {
    assert_eq!(
        texts("ls | xargs -n 1 rm -rf"),
        ["ls", "xargs -n 1 rm -rf", "rm -rf"]
    );
    assert_eq!(
        texts(r"find / -name x -exec rm -rf {} \; -print"),
        [r"find / -name x -exec rm -rf {} ; -print", "rm -rf {}"]
    );
}

#[test]
fn redirections_are_kept_apart() {
    let parts = split("echo hi > out.txt 2>&1 < in").unwrap();
    assert_eq!(parts[0].words, ["echo", "hi"]);
    assert_eq!(
        parts[0].redirects,
        [
            Redirect {
                op: ">",
                target: "out.txt".into()
            },
            Redirect {
                op: ">&",
                target: "1".into()
            },
            Redirect {
                op: "<",
                target: "in".into()
            },
        ]
    );
    assert!(parts[0].writes_file());
    assert_eq!(parts[0].text(), "echo hi > out.txt >& 1 < in");
    assert!(!split("ls 2>/dev/null").unwrap()[0].writes_file());
    assert!(split("ls &>> log").unwrap()[0].writes_file());
    assert!(split("ls >& log").unwrap()[0].writes_file());
    assert!(!split("ls >&2").unwrap()[0].writes_file());
    assert!(!split("cat < x").unwrap()[0].writes_file());
    assert!(!split("ls 2>&1").unwrap()[0].writes_file());
    // A quoted number is an argument.
    assert_eq!(split("echo '2'>x").unwrap()[0].words, ["echo", "2"]);
}

#[test]
fn heredocs() {
    let cmd = "cat <<EOF > f.txt\nrm -rf / ; it's fine\n$(reboot)\nEOF\nls";
    assert_eq!(texts(cmd), ["cat << EOF > f.txt", "ls", "reboot"]);
    let quoted = "cat <<'EOF'\n$(reboot)\nEOF\nls";
    assert_eq!(texts(quoted), ["cat << EOF", "ls"]);
    let tabs = "cat <<-EOF\n\tbody\n\tEOF\npwd";
    assert_eq!(texts(tabs), ["cat <<- EOF", "pwd"]);
}

#[test]
fn dynamic_command_names() {
    assert!(split("$CMD -rf /").unwrap()[0].dynamic);
    assert!(split("$(echo rm) -rf /").unwrap()[0].dynamic);
    assert!(!split("rm $X").unwrap()[0].dynamic);
}

#[test]
fn unbalanced_input_is_an_error_not_a_panic() {
    for bad in [
        "echo 'x",
        "echo \"x",
        "echo $(ls",
        "echo `ls",
        "echo ${x",
        "echo \"$(ls\"",
    ] {
        assert!(split(bad).is_err(), "{bad}");
    }
    let deep = "$(".repeat(20) + &")".repeat(20);
    assert_eq!(split(&format!("echo {deep}")), Err(ParseError::TooDeep));
    // Odd but valid inputs do not panic.
    for odd in [
        "", ";;;", "|", "&&", ">", "<<", "\\", "$", "$(", "a\\", ">(x)", "2>", "((", "))",
    ] {
        let _ = split(odd);
    }
}
