//! Statement shapes: SQL text with every literal replaced by a placeholder.
//!
//! Two executions of "the same statement" with different values have one shape:
//! `SELECT * FROM world WHERE id = 42`, `SELECT * FROM world WHERE  id=7` and the prepared
//! `SELECT * FROM world WHERE id = $1` are all `SELECT * FROM world WHERE id = ?`.
//!
//! Rules (lexical structure from the PostgreSQL documentation, "SQL Syntax", 4.1):
//! - string constants `'...'` (with `''`), `E'...'` (with backslash escapes), `B'...'`,
//!   `X'...'`, `N'...'`, `U&'...'`, and dollar-quoted `$tag$...$tag$` become `?`;
//! - numeric constants (`42`, `1.5`, `.5`, `1e-3`, `0x1F`, `1_000`) become `?`;
//! - positional parameters `$1`, `$2`, ... become `?`, so a prepared statement and the same
//!   statement with literals have one shape;
//! - comments (`-- ...`, nested `/* ... */`) are removed; runs of whitespace become one space,
//!   with no space after `(`/`[` nor before `)`/`]`/`,`/`;`/`[`, none around `.` and `::`;
//!   a `(` keeps the author's choice of a space before it (`count(*)`, `deals (id, title)`);
//! - an `IN (?, ?, ...)` list of placeholders becomes `IN (?)`;
//! - quoted identifiers `"..."`, identifiers, keywords and operators are kept as written
//!   (no case folding: the shape shows the application's own text).
//!
//! A simple query may hold several statements: [`split_statements`] splits at top-level `;`.
//! SQL that was cut by the capture bound is normalised up to the cut, its last (possibly
//! partial) token dropped, and marked truncated: the text ends with ` …`.

/// The placeholder every literal and parameter becomes.
pub const PLACEHOLDER: &str = "?";

/// Token text of a `(` written directly after the previous token (rendered as `(`).
const ATTACHED_OPEN: &str = "(\u{0}";

fn is_open(t: &Tok) -> bool {
    matches!(t, Tok::Punct("(") | Tok::Punct(ATTACHED_OPEN))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// Identifier, keyword, quoted identifier or operator: kept verbatim.
    Word(String),
    /// A literal or parameter.
    Lit,
    /// One punctuation character: ( ) [ ] , ; . or the two-character `::`.
    Punct(&'static str),
}

/// Tokenise `sql`; comments and whitespace are dropped. An unterminated string, quoted
/// identifier, dollar quote or comment runs to the end of the text (cut SQL is normal here).
fn tokenize(sql: &str) -> Vec<Tok> {
    let b = sql.as_bytes();
    let n = b.len();
    let mut i = 0;
    let mut out = Vec::new();
    let is_ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_' || c >= 0x80;
    let is_ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    let is_op_char = |c: u8| b"+-*/<>=~!@#%^&|`?".contains(&c);
    while i < n {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && i + 1 < n && b[i + 1] == b'-' {
            while i < n && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && i + 1 < n && b[i + 1] == b'*' {
            let mut depth = 0usize;
            while i < n {
                if b[i] == b'/' && i + 1 < n && b[i + 1] == b'*' {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && i + 1 < n && b[i + 1] == b'/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'\'' {
            i = skip_string(b, i, false);
            out.push(Tok::Lit);
        } else if c == b'"' {
            let start = i;
            i += 1;
            while i < n {
                if b[i] == b'"' {
                    if i + 1 < n && b[i + 1] == b'"' {
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                i += 1;
            }
            out.push(Tok::Word(sql[start..i.min(n)].to_string()));
        } else if c == b'$' {
            // $n parameter, or $tag$ ... $tag$ dollar quoting.
            let mut j = i + 1;
            if j < n && b[j].is_ascii_digit() {
                while j < n && b[j].is_ascii_digit() {
                    j += 1;
                }
                out.push(Tok::Lit);
                i = j;
                continue;
            }
            while j < n && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
                j += 1;
            }
            if j < n && b[j] == b'$' {
                let tag = &b[i..=j];
                let body = j + 1;
                let end = find(b, body, tag).map(|p| p + tag.len()).unwrap_or(n);
                out.push(Tok::Lit);
                i = end;
            } else {
                out.push(Tok::Word("$".to_string()));
                i += 1;
            }
        } else if c.is_ascii_digit() || (c == b'.' && i + 1 < n && b[i + 1].is_ascii_digit()) {
            i = skip_number(b, i);
            out.push(Tok::Lit);
        } else if is_ident_start(c) {
            let start = i;
            while i < n && is_ident_char(b[i]) {
                i += 1;
            }
            let word = &sql[start..i];
            // Prefixed string constants: E'..', B'..', X'..', N'..', U&'..'.
            if i < n && b[i] == b'\'' && matches!(word, "E" | "e" | "B" | "b" | "X" | "x" | "N" | "n") {
                i = skip_string(b, i, word.eq_ignore_ascii_case("e"));
                out.push(Tok::Lit);
            } else if (word == "U" || word == "u") && i + 1 < n && b[i] == b'&' && b[i + 1] == b'\'' {
                i = skip_string(b, i + 1, false);
                out.push(Tok::Lit);
            } else {
                out.push(Tok::Word(word.to_string()));
            }
        } else if c == b':' && i + 1 < n && b[i + 1] == b':' {
            out.push(Tok::Punct("::"));
            i += 2;
        } else if c == b'(' {
            // Keep the author's spacing before `(`: `count(*)` vs `deals (a, b)`.
            let spaced = i > 0 && (b[i - 1].is_ascii_whitespace() || b[i - 1] == b'/');
            out.push(Tok::Punct(if spaced || out.is_empty() { "(" } else { ATTACHED_OPEN }));
            i += 1;
        } else if let Some(p) = punct(c) {
            out.push(Tok::Punct(p));
            i += 1;
        } else if is_op_char(c) {
            let start = i;
            while i < n && is_op_char(b[i]) {
                // an operator stops before a comment start
                if (b[i] == b'-' && i + 1 < n && b[i + 1] == b'-')
                    || (b[i] == b'/' && i + 1 < n && b[i + 1] == b'*')
                {
                    break;
                }
                i += 1;
            }
            if i == start {
                i += 1;
            }
            out.push(Tok::Word(sql[start..i].to_string()));
        } else {
            // Anything else (a lone ':' etc.): keep the character.
            let ch_len = sql[i..].chars().next().map(char::len_utf8).unwrap_or(1);
            out.push(Tok::Word(sql[i..i + ch_len].to_string()));
            i += ch_len;
        }
    }
    out
}

fn punct(c: u8) -> Option<&'static str> {
    Some(match c {
        b'(' => "(",
        b')' => ")",
        b'[' => "[",
        b']' => "]",
        b',' => ",",
        b';' => ";",
        b'.' => ".",
        b':' => ":",
        _ => return None,
    })
}

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from > hay.len() {
        return None;
    }
    hay[from..].windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// Skip a quoted string starting at the quote at `i`; returns the index after it (or the end).
fn skip_string(b: &[u8], i: usize, backslash: bool) -> usize {
    let n = b.len();
    let mut j = i + 1;
    while j < n {
        if backslash && b[j] == b'\\' {
            j += 2;
            continue;
        }
        if b[j] == b'\'' {
            if j + 1 < n && b[j + 1] == b'\'' {
                j += 2;
                continue;
            }
            return j + 1;
        }
        j += 1;
    }
    n
}

fn skip_number(b: &[u8], i: usize) -> usize {
    let n = b.len();
    let mut j = i;
    if b[j] == b'0' && j + 1 < n && matches!(b[j + 1], b'x' | b'X' | b'o' | b'O' | b'b' | b'B') {
        j += 2;
        while j < n && (b[j].is_ascii_hexdigit() || b[j] == b'_') {
            j += 1;
        }
        return j;
    }
    while j < n && (b[j].is_ascii_digit() || b[j] == b'_') {
        j += 1;
    }
    if j < n && b[j] == b'.' && !(j + 1 < n && b[j + 1] == b'.') {
        j += 1;
        while j < n && (b[j].is_ascii_digit() || b[j] == b'_') {
            j += 1;
        }
    }
    if j < n && (b[j] == b'e' || b[j] == b'E') {
        let mut k = j + 1;
        if k < n && (b[k] == b'+' || b[k] == b'-') {
            k += 1;
        }
        if k < n && b[k].is_ascii_digit() {
            while k < n && b[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
        }
    }
    j
}

/// Replace `IN ( ?, ?, ... )` by `IN ( ? )`.
fn collapse_in_lists(toks: Vec<Tok>) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        let is_in = matches!(&toks[i], Tok::Word(w) if w.eq_ignore_ascii_case("in"));
        if is_in && toks.get(i + 1).is_some_and(is_open) {
            let mut j = i + 2;
            let mut ok = false;
            let mut expect_lit = true;
            while j < toks.len() {
                match (&toks[j], expect_lit) {
                    (Tok::Lit, true) => expect_lit = false,
                    (Tok::Punct(","), false) => expect_lit = true,
                    (Tok::Punct(")"), false) => {
                        ok = true;
                        break;
                    }
                    _ => break,
                }
                j += 1;
            }
            if ok {
                out.push(toks[i].clone());
                out.push(toks[i + 1].clone());
                out.push(Tok::Lit);
                out.push(Tok::Punct(")"));
                i = j + 1;
                continue;
            }
        }
        out.push(toks[i].clone());
        i += 1;
    }
    out
}

fn render(toks: &[Tok]) -> String {
    let mut s = String::new();
    let mut prev: Option<&Tok> = None;
    for t in toks {
        let text = match t {
            Tok::Word(w) => w.as_str(),
            Tok::Lit => PLACEHOLDER,
            Tok::Punct(ATTACHED_OPEN) => "(",
            Tok::Punct(p) => p,
        };
        let no_space_before = matches!(t, Tok::Punct(")" | "]" | "," | ";" | "." | "::" | "[" | ATTACHED_OPEN));
        let no_space_after_prev = matches!(prev, Some(Tok::Punct("(" | "[" | "." | "::" | ATTACHED_OPEN)) | None);
        if !(no_space_before || no_space_after_prev) {
            s.push(' ');
        }
        s.push_str(text);
        prev = Some(t);
    }
    s
}

/// The shape of one statement's SQL text. `truncated` = the text was cut by the capture
/// bound: its last token is dropped and ` …` appended. Returns an empty string for text
/// that holds no token (only whitespace, comments or `;`).
pub fn shape(sql: &str, truncated: bool) -> String {
    let mut toks = tokenize(sql);
    if truncated {
        toks.pop();
    }
    while toks.last() == Some(&Tok::Punct(";")) {
        toks.pop();
    }
    let toks = collapse_in_lists(toks);
    let mut s = render(&toks);
    if truncated {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push('…');
    }
    s
}

/// Split a simple query's text into its statements at top-level `;` (outside strings,
/// quoted identifiers, dollar quotes and comments) and return the shape of each non-empty
/// one, in order. `truncated` applies to the last piece only.
pub fn split_statements(sql: &str, truncated: bool) -> Vec<String> {
    let toks = tokenize(sql);
    let mut parts: Vec<Vec<Tok>> = vec![Vec::new()];
    let mut depth = 0i32;
    for t in toks {
        match &t {
            Tok::Punct("(" | "[" | ATTACHED_OPEN) => depth += 1,
            Tok::Punct(")") | Tok::Punct("]") => depth -= 1,
            _ => {}
        }
        if t == Tok::Punct(";") && depth <= 0 {
            parts.push(Vec::new());
        } else if let Some(last) = parts.last_mut() {
            last.push(t);
        }
    }
    let last_index = parts.len() - 1;
    let mut out = Vec::new();
    for (i, mut p) in parts.into_iter().enumerate() {
        let cut = truncated && i == last_index;
        if cut {
            p.pop();
        }
        if p.is_empty() && !cut {
            continue;
        }
        let mut s = render(&collapse_in_lists(p));
        if cut {
            if s.is_empty() {
                // Only a partial token was seen: nothing to show, but the statement existed.
                s.push('…');
            } else {
                s.push_str(" …");
            }
        }
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_params_become_one_shape() {
        let a = shape("SELECT * FROM world WHERE id = 42", false);
        let b = shape("SELECT  *\n FROM world WHERE id=7;", false);
        let c = shape("SELECT * FROM world WHERE id = $1", false);
        assert_eq!(a, "SELECT * FROM world WHERE id = ?");
        assert_eq!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn strings_numbers_and_dollar_quotes() {
        assert_eq!(
            shape("SELECT 'it''s', 1.5e3, $$dollar$$, $t$x$y$t$, E'a\\'b', X'1F', -3, .5", false),
            "SELECT ?, ?, ?, ?, ?, ?, - ?, ?"
        );
        assert_eq!(
            shape("SELECT set_config('app.actor', $1, true)", false),
            "SELECT set_config(?, ?, true)"
        );
    }

    #[test]
    fn comments_removed_identifiers_kept() {
        assert_eq!(
            shape("/* SQLx ping */ SELECT \"Id\" -- x\n FROM t1 WHERE a::int >= 10", false),
            "SELECT \"Id\" FROM t1 WHERE a::int >= ?"
        );
        assert_eq!(shape("/* SQLx ping */", false), "");
        assert_eq!(shape(" ; ", false), "");
    }

    #[test]
    fn in_lists_collapse() {
        assert_eq!(
            shape("SELECT id FROM users WHERE id IN (1, 2, 3) AND x = ANY($1)", false),
            "SELECT id FROM users WHERE id IN (?) AND x = ANY(?)"
        );
        assert_eq!(
            shape("INSERT INTO t (a, b) VALUES (1, 'x')", false),
            "INSERT INTO t (a, b) VALUES (?, ?)"
        );
    }

    #[test]
    fn truncated_text_drops_the_partial_token() {
        assert_eq!(shape("SELECT id, randomnumber FROM wor", true), "SELECT id, randomnumber FROM …");
        assert_eq!(shape("SELECT id FROM t WHERE name = 'abc", true), "SELECT id FROM t WHERE name = …");
    }

    #[test]
    fn split_simple_query() {
        assert_eq!(
            split_statements("SELECT 'a;b' AS s; SELECT 2 -- trailing; comment", false),
            vec!["SELECT ? AS s".to_string(), "SELECT ?".to_string()]
        );
        assert_eq!(split_statements(";", false), Vec::<String>::new());
        assert_eq!(split_statements("", false), Vec::<String>::new());
        assert_eq!(
            split_statements("BEGIN; UPDATE t SET a = 1; COMMIT", false),
            vec!["BEGIN".to_string(), "UPDATE t SET a = ?".to_string(), "COMMIT".to_string()]
        );
    }

    #[test]
    fn function_calls_stay_attached() {
        assert_eq!(shape("SELECT count(*) FROM deals", false), "SELECT count(*) FROM deals");
        assert_eq!(shape("SELECT now( )", false), "SELECT now()");
        assert_eq!(
            shape("INSERT INTO deals (a,b) VALUES ($1,$2) RETURNING id", false),
            "INSERT INTO deals (a, b) VALUES (?, ?) RETURNING id"
        );
        assert_eq!(shape("SELECT a[1], x::int[] FROM t", false), "SELECT a[?], x::int[] FROM t");
    }
}
