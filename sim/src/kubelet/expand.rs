//! Kubernetes `$(VAR)` expansion in env values, `command` and `args`, with the kubelet's rules
//! (k8s.io/kubernetes third_party/forked/golang/expansion): `$(NAME)` becomes the variable's value
//! when it is defined and stays as written when it is not, `$$` is a literal `$`, and any other
//! `$` is copied as is.

/// Expands `$(NAME)` references in `input` with `lookup`.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(reference) = after.strip_prefix('(') {
            match reference.find(')') {
                Some(close) => {
                    let name = &reference[..close];
                    match lookup(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &reference[close + 1..];
                }
                None => {
                    // An unclosed reference is literal text.
                    out.push_str("$(");
                    rest = reference;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "DIR" => Some("/out".into()),
            "EMPTY" => Some(String::new()),
            "NESTED" => Some("$(DIR)".into()),
            _ => None,
        }
    }

    #[test]
    fn expands_defined_variables() {
        assert_eq!(expand("$(DIR)/crds", vars), "/out/crds");
        assert_eq!(expand("a$(DIR)b$(DIR)", vars), "a/outb/out");
        assert_eq!(expand("x$(EMPTY)y", vars), "xy");
    }

    #[test]
    fn keeps_undefined_references_as_written() {
        assert_eq!(expand("$(MISSING)/x", vars), "$(MISSING)/x");
    }

    #[test]
    fn double_dollar_escapes() {
        assert_eq!(expand("$$(DIR)", vars), "$(DIR)");
        assert_eq!(expand("$$$(DIR)", vars), "$/out");
        assert_eq!(expand("cost: $$5", vars), "cost: $5");
    }

    #[test]
    fn other_dollars_are_literal() {
        assert_eq!(expand("$HOME and $", vars), "$HOME and $");
        assert_eq!(expand("$(unclosed", vars), "$(unclosed");
        assert_eq!(expand("€$(DIR)€", vars), "€/out€");
    }

    #[test]
    fn values_are_not_expanded_again() {
        assert_eq!(expand("$(NESTED)", vars), "$(DIR)");
    }
}
