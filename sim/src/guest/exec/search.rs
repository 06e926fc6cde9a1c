//! `grep` with fixed strings (`-F`): enough to search a node's files for values, as an operator
//! or a proof script does (`sudo grep -rlswF -e A -e B /etc`). Regular expressions are not
//! simulated: a pattern that would mean something else as one is refused, not guessed.
//!
//! Options: `-r`/`-R`, `-l`, `-s`, `-w`, `-F`, `-q`, `-e PATTERN` (repeatable), combinable
//! (`-rlswF`). Exit status as GNU grep's: 0 when a line was selected, 1 when none was, 2 on an
//! error (but 0 with `-q` once a line was selected).

use super::{Ctx, Run};

#[derive(Default)]
struct Options {
    recursive: bool,
    files_with_matches: bool,
    no_messages: bool,
    word: bool,
    fixed: bool,
    quiet: bool,
    patterns: Vec<String>,
    operands: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut iter = args.iter();
    let mut explicit_patterns = false;
    while let Some(arg) = iter.next() {
        if arg == "--" {
            options.operands.extend(iter.by_ref().cloned());
            break;
        }
        let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
            options.operands.push(arg.clone());
            continue;
        };
        if flags.starts_with('-') {
            return Err(format!("grep: option {arg} is not simulated"));
        }
        let mut chars = flags.chars();
        while let Some(flag) = chars.next() {
            match flag {
                'r' | 'R' => options.recursive = true,
                'l' => options.files_with_matches = true,
                's' => options.no_messages = true,
                'w' => options.word = true,
                'F' => options.fixed = true,
                'q' => options.quiet = true,
                'e' => {
                    // `-ePATTERN` or `-e PATTERN`.
                    let rest: String = chars.by_ref().collect();
                    let pattern = if rest.is_empty() {
                        iter.next()
                            .cloned()
                            .ok_or("grep: option requires an argument -- 'e'")?
                    } else {
                        rest
                    };
                    options.patterns.push(pattern);
                    explicit_patterns = true;
                }
                other => return Err(format!("grep: option -{other} is not simulated")),
            }
        }
    }
    if !explicit_patterns {
        if options.operands.is_empty() {
            return Err("Usage: grep [OPTION]... PATTERNS [FILE]...".into());
        }
        options.patterns.push(options.operands.remove(0));
    }
    if !options.fixed
        && let Some(pattern) = options
            .patterns
            .iter()
            .find(|p| p.contains(['.', '[', ']', '*', '^', '$', '\\']))
    {
        return Err(format!(
            "grep: simulated grep matches fixed strings only: use -F for {pattern:?}"
        ));
    }
    Ok(options)
}

/// Whether `line` holds `pattern`, as a whole word when `word` (GNU grep's `-w`: the match is
/// neither preceded nor followed by a word constituent — letters, digits, underscore).
fn matches(line: &str, pattern: &str, word: bool) -> bool {
    if !word {
        return line.contains(pattern);
    }
    let constituent = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    line.match_indices(pattern).any(|(at, found)| {
        !constituent(line[..at].chars().next_back())
            && !constituent(line[at + found.len()..].chars().next())
    })
}

pub fn grep(ctx: &mut Ctx<'_>, args: &[String], stdin: &[u8]) -> Run {
    let options = match parse(args) {
        Ok(options) => options,
        Err(message) => return Run::fail(2, message),
    };
    let mut run = Run::ok();
    let mut selected = false;
    let mut error = false;
    let mut inputs: Vec<(String, Result<Vec<u8>, String>)> = Vec::new();
    if options.operands.is_empty() {
        inputs.push(("(standard input)".into(), Ok(stdin.to_vec())));
    }
    for operand in &options.operands {
        let path = ctx.path(operand);
        if ctx.is_dir(&path) {
            if !options.recursive {
                inputs.push((operand.clone(), Err("Is a directory".into())));
                continue;
            }
            for entry in ctx.entries_under(&path) {
                if ctx.is_file(&entry) {
                    let shown =
                        format!("{}{}", operand.trim_end_matches('/'), &entry[path.len()..]);
                    let content = ctx.read(&entry).map_err(|e| e.message().to_owned());
                    inputs.push((shown, content));
                }
            }
        } else {
            let content = ctx.read(&path).map_err(|e| e.message().to_owned());
            inputs.push((operand.clone(), content));
        }
    }
    let several = inputs.len() > 1 || options.recursive;
    for (name, content) in inputs {
        let content = match content {
            Ok(content) => content,
            Err(message) => {
                error = true;
                if !options.no_messages {
                    run.stderr
                        .extend_from_slice(format!("grep: {name}: {message}\n").as_bytes());
                }
                continue;
            }
        };
        let text = String::from_utf8_lossy(&content);
        for line in text.lines() {
            if !options
                .patterns
                .iter()
                .any(|p| matches(line, p, options.word))
            {
                continue;
            }
            selected = true;
            if options.quiet {
                return Run::ok();
            }
            if options.files_with_matches {
                run.stdout.extend_from_slice(format!("{name}\n").as_bytes());
                break;
            }
            let prefix = if several {
                format!("{name}:")
            } else {
                String::new()
            };
            run.stdout
                .extend_from_slice(format!("{prefix}{line}\n").as_bytes());
        }
    }
    run.code = match (error, selected) {
        (true, _) => 2,
        (false, true) => 0,
        (false, false) => 1,
    };
    run
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn recursive_fixed_word_search_lists_the_files_that_hold_a_value() {
        let mut m = sealed();
        let out = run(
            &mut m,
            "sudo grep -rlswF -e 192.168.126.11 -e 10.9.9.9 /etc",
        );
        assert_eq!(out.code, 0, "{}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "/etc/systemd/system/kubelet.service.d/80-nodeip.conf\n"
        );
        // A word match only: 192.168.126.1 is a prefix of the node IP, not a word of its own.
        let out = run(&mut m, "sudo grep -rlswF -e 192.168.126.1 /etc");
        assert_eq!((out.code, stdout(&out)), (1, String::new()));
    }

    #[test]
    fn unreadable_files_are_errors_and_regular_expressions_are_refused() {
        let mut m = sealed();
        let out = run(&mut m, "grep -F auths /var/lib/kubelet/config.json");
        assert_eq!(out.code, 2);
        assert!(stderr(&out).contains("Permission denied"));
        let out = run(&mut m, "grep -q a.b /etc/hosts");
        assert_eq!(out.code, 2);
        assert!(stderr(&out).contains("use -F"));
        let out = run(&mut m, "grep -F localhost /etc/hosts");
        assert_eq!(out.code, 0);
        assert!(stdout(&out).starts_with("127.0.0.1   localhost"));
    }
}
