//! The part of a shell the simulated guest accepts: words with POSIX quoting, an optional
//! leading `sudo`, and `|` between simple commands. Everything that would make the line a script
//! — `;`, `&&`, `||`, `&`, redirections, `$…` expansion, backticks, subshells, globs, comments,
//! assignments — is refused, because production must not send scripts (see `guestcluster::guest`).

/// One simple command of a pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// Prefixed with `sudo`.
    pub sudo: bool,
    /// Program and arguments, unquoted; never empty.
    pub argv: Vec<String>,
}

/// `a | b | c`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    pub stages: Vec<SimpleCommand>,
}

/// Why a line is not a simple command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty command")]
    Empty,
    #[error("unterminated quote")]
    UnterminatedQuote,
    #[error("empty command in pipeline")]
    EmptyStage,
    #[error("shell syntax {0:?} is not supported: send one simple command (optionally piped)")]
    Unsupported(String),
    #[error("sudo options are not supported: {0}")]
    SudoOption(String),
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Pipe,
}

/// Parses one command line.
pub fn parse(line: &str) -> Result<Pipeline, ParseError> {
    let tokens = tokenize(line)?;
    if tokens.is_empty() {
        return Err(ParseError::Empty);
    }
    let mut stages = Vec::new();
    let mut current: Vec<String> = Vec::new();
    for token in tokens {
        match token {
            Token::Word(word) => current.push(word),
            Token::Pipe => stages.push(stage(std::mem::take(&mut current))?),
        }
    }
    stages.push(stage(current)?);
    Ok(Pipeline { stages })
}

fn stage(mut argv: Vec<String>) -> Result<SimpleCommand, ParseError> {
    let sudo = argv.first().is_some_and(|w| w == "sudo");
    if sudo {
        argv.remove(0);
        if let Some(option) = argv.first().filter(|w| w.starts_with('-')) {
            return Err(ParseError::SudoOption(option.clone()));
        }
    }
    if argv.is_empty() {
        return Err(ParseError::EmptyStage);
    }
    if is_assignment(&argv[0]) {
        return Err(ParseError::Unsupported(format!(
            "variable assignment {}",
            argv[0]
        )));
    }
    Ok(SimpleCommand { sudo, argv })
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Splits a line into words and pipes, removing quotes.
fn tokenize(line: &str) -> Result<Vec<Token>, ParseError> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    // A word can be empty but present (`''`).
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let unsupported = |s: &str| Err(ParseError::Unsupported(s.to_string()));
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    tokens.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
            }
            '|' => {
                if chars.peek() == Some(&'|') {
                    return unsupported("||");
                }
                if in_word {
                    tokens.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
                tokens.push(Token::Pipe);
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(ParseError::UnterminatedQuote),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('$' | '`' | '"' | '\\')) => word.push(ch),
                            Some('\n') => {}
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err(ParseError::UnterminatedQuote),
                        },
                        Some('$') => return unsupported("$ expansion"),
                        Some('`') => return unsupported("`"),
                        Some(ch) => word.push(ch),
                        None => return Err(ParseError::UnterminatedQuote),
                    }
                }
            }
            '\\' => match chars.next() {
                // Line continuation.
                Some('\n') => {}
                Some(ch) => {
                    in_word = true;
                    word.push(ch);
                }
                None => return unsupported("trailing \\"),
            },
            ';' => return unsupported(";"),
            '&' => {
                return unsupported(if chars.peek() == Some(&'&') {
                    "&&"
                } else {
                    "&"
                });
            }
            '>' | '<' => return unsupported("redirection"),
            '(' | ')' => return unsupported("subshell"),
            '`' => return unsupported("`"),
            '$' => return unsupported("$ expansion"),
            '\n' | '\r' => return unsupported("newline"),
            '*' | '?' => return unsupported("glob"),
            '{' | '}' => return unsupported("brace"),
            '#' if !in_word => return unsupported("comment"),
            '~' if !in_word => return unsupported("~ expansion"),
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        tokens.push(Token::Word(word));
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestcluster::guest::Command;

    fn argv(line: &str) -> Vec<Vec<String>> {
        parse(line)
            .unwrap()
            .stages
            .into_iter()
            .map(|s| s.argv)
            .collect()
    }

    #[test]
    fn splits_words_and_pipes() {
        let p = parse("echo aGk= | base64 --decode | sudo tee /etc/x").unwrap();
        assert_eq!(p.stages.len(), 3);
        assert!(!p.stages[0].sudo && p.stages[2].sudo);
        assert_eq!(p.stages[2].argv, vec!["tee", "/etc/x"]);
        assert_eq!(argv("a|b"), vec![vec!["a"], vec!["b"]]);
    }

    #[test]
    fn removes_quotes_and_escapes() {
        assert_eq!(
            argv(r#"echo 'a b' "c d" e\ f ''"#),
            vec![vec!["echo", "a b", "c d", "e f", ""]]
        );
        assert_eq!(argv(r"echo 'it'\''s'"), vec![vec!["echo", "it's"]]);
        assert_eq!(
            argv(r#"echo "a\"b\\c\d""#),
            vec![vec!["echo", r#"a"b\c\d"#]]
        );
        assert_eq!(argv("echo 'a|b;c$d'"), vec![vec!["echo", "a|b;c$d"]]);
    }

    #[test]
    fn production_quoting_round_trips() {
        let words = ["plain", "with space", "it's", "$(no)", "a|b", "", "*"];
        let line = Command::new(words).line();
        assert_eq!(argv(&line), vec![words.to_vec()]);
    }

    #[test]
    fn refuses_scripts() {
        for line in [
            "a; b",
            "a && b",
            "a || b",
            "a &",
            "echo x > /etc/y",
            "cat < /etc/y",
            "echo $(id)",
            "echo \"$HOME\"",
            "echo `id`",
            "(a)",
            "ls *.log",
            "a\nb",
            "FOO=1 cmd",
            "echo {a,b}",
            "ls ~",
            "# comment",
        ] {
            assert!(
                matches!(parse(line), Err(ParseError::Unsupported(_))),
                "{line:?} should be refused, got {:?}",
                parse(line)
            );
        }
    }

    #[test]
    fn reports_structural_errors() {
        assert_eq!(parse("   "), Err(ParseError::Empty));
        assert_eq!(parse("echo 'x"), Err(ParseError::UnterminatedQuote));
        assert_eq!(parse("a | | b"), Err(ParseError::EmptyStage));
        assert_eq!(parse("sudo"), Err(ParseError::EmptyStage));
        assert_eq!(
            parse("sudo -u x id"),
            Err(ParseError::SudoOption("-u".into()))
        );
        // A word containing '#' or '=' mid-word is fine.
        assert_eq!(argv("echo a#b k=v"), vec![vec!["echo", "a#b", "k=v"]]);
    }
}
