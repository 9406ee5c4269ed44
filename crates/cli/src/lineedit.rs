//! A small line editor for `csd sql`'s interactive shell: the terminal in raw mode
//! (POSIX termios through `libc`), editing keys, and a history kept in a file.
//!
//! Keys: printable characters insert; Backspace and Delete (`ESC [ 3 ~`, Ctrl-D on a
//! non-empty line) erase; Left/Right, Home/End, Ctrl-A/Ctrl-E move; Ctrl-U and Ctrl-K
//! cut before / after the cursor; Up/Down (Ctrl-P/Ctrl-N) walk the history; Enter ends
//! the line; Ctrl-C abandons it; Ctrl-D on an empty line is end of input.
//!
//! Choice: a hand-written editor instead of `rustyline` — rustyline's `nix` turns on a
//! `libc` feature that every other crate of the workspace shares, which rebuilds the
//! whole dependency tree (DataFusion included) for this one shell. The editing logic
//! ([`LineState`], [`parse_keys`]) is pure and unit-tested; only [`Editor::read_line`]
//! touches the terminal, and it restores the terminal's mode on every exit path.

use std::io::{Read, Write};
use std::path::PathBuf;

/// Lines of history kept (the file is trimmed to this when it is read).
const HISTORY_MAX: usize = 1000;

/// One key press, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// A character to insert.
    Char(char),
    /// Enter.
    Enter,
    /// Backspace.
    Backspace,
    /// Delete (the character under the cursor).
    Delete,
    /// Cursor left.
    Left,
    /// Cursor right.
    Right,
    /// Start of line.
    Home,
    /// End of line.
    End,
    /// Previous history entry.
    Up,
    /// Next history entry.
    Down,
    /// Cut from the start of the line to the cursor.
    CutBefore,
    /// Cut from the cursor to the end of the line.
    CutAfter,
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D.
    CtrlD,
    /// Anything else (ignored).
    Other,
}

/// Decodes the bytes a terminal sends into keys; an incomplete trailing sequence stays
/// in `pending` for the next call.
pub(crate) fn parse_keys(pending: &mut Vec<u8>) -> Vec<Key> {
    let mut keys = Vec::new();
    let b = std::mem::take(pending);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let (key, used) = match c {
            b'\r' | b'\n' => (Key::Enter, 1),
            0x7f | 0x08 => (Key::Backspace, 1),
            0x01 => (Key::Home, 1),
            0x05 => (Key::End, 1),
            0x02 => (Key::Left, 1),
            0x06 => (Key::Right, 1),
            0x10 => (Key::Up, 1),
            0x0e => (Key::Down, 1),
            0x15 => (Key::CutBefore, 1),
            0x0b => (Key::CutAfter, 1),
            0x03 => (Key::Interrupt, 1),
            0x04 => (Key::CtrlD, 1),
            0x1b => {
                // ESC [ X, ESC O X, ESC [ n ~
                let rest = &b[i + 1..];
                match rest {
                    [] | [b'[' | b'O'] => {
                        pending.extend_from_slice(&b[i..]);
                        return keys;
                    }
                    [b'[' | b'O', x, ..] if x.is_ascii_alphabetic() => (
                        match x {
                            b'A' => Key::Up,
                            b'B' => Key::Down,
                            b'C' => Key::Right,
                            b'D' => Key::Left,
                            b'H' => Key::Home,
                            b'F' => Key::End,
                            _ => Key::Other,
                        },
                        3,
                    ),
                    [b'[', ..] => {
                        // ESC [ digits ~
                        match rest[1..].iter().position(|&x| !x.is_ascii_digit()) {
                            None => {
                                pending.extend_from_slice(&b[i..]);
                                return keys;
                            }
                            Some(p) => {
                                let digits = &rest[1..1 + p];
                                let key = if rest[1 + p] == b'~' {
                                    match digits {
                                        b"3" => Key::Delete,
                                        b"1" | b"7" => Key::Home,
                                        b"4" | b"8" => Key::End,
                                        _ => Key::Other,
                                    }
                                } else {
                                    Key::Other
                                };
                                (key, 2 + p + 1)
                            }
                        }
                    }
                    _ => (Key::Other, 1),
                }
            }
            c if c < 0x20 => (Key::Other, 1),
            _ => {
                // One UTF-8 character.
                let len = match c {
                    0xc0..=0xdf => 2,
                    0xe0..=0xef => 3,
                    0xf0..=0xf7 => 4,
                    _ => 1,
                };
                if i + len > b.len() {
                    pending.extend_from_slice(&b[i..]);
                    return keys;
                }
                match std::str::from_utf8(&b[i..i + len])
                    .ok()
                    .and_then(|s| s.chars().next())
                {
                    Some(ch) => (Key::Char(ch), len),
                    None => (Key::Other, 1),
                }
            }
        };
        keys.push(key);
        i += used;
    }
    keys
}

/// What a key did to the line being edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Keep editing.
    Edit,
    /// The line is complete.
    Done(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D on an empty line.
    Eof,
}

/// The line being edited and the history walk: pure state, no terminal.
#[derive(Debug, Default)]
pub(crate) struct LineState {
    buf: Vec<char>,
    cursor: usize,
    /// Index into the history while walking it (`None`: the line being typed).
    walk: Option<usize>,
    /// The line being typed, kept while the history is shown.
    typed: Vec<char>,
}

impl LineState {
    /// The line.
    pub(crate) fn text(&self) -> String {
        self.buf.iter().collect()
    }

    /// Cursor position in characters.
    pub(crate) fn cursor(&self) -> usize {
        self.cursor
    }

    fn show(&mut self, line: &str) {
        self.buf = line.chars().collect();
        self.cursor = self.buf.len();
    }

    /// Applies `key`, with `history` (oldest first) for Up/Down.
    pub(crate) fn key(&mut self, key: Key, history: &[String]) -> Outcome {
        match key {
            Key::Char(c) => {
                self.buf.insert(self.cursor, c);
                self.cursor += 1;
            }
            Key::Enter => return Outcome::Done(self.text()),
            Key::Backspace => {
                if self.cursor > 0 {
                    self.cursor -= 1;
                    self.buf.remove(self.cursor);
                }
            }
            Key::Delete => {
                if self.cursor < self.buf.len() {
                    self.buf.remove(self.cursor);
                }
            }
            Key::CtrlD => {
                if self.buf.is_empty() {
                    return Outcome::Eof;
                }
                if self.cursor < self.buf.len() {
                    self.buf.remove(self.cursor);
                }
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.buf.len()),
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = self.buf.len(),
            Key::CutBefore => {
                self.buf.drain(..self.cursor);
                self.cursor = 0;
            }
            Key::CutAfter => self.buf.truncate(self.cursor),
            Key::Up => {
                let next = match self.walk {
                    None if !history.is_empty() => {
                        self.typed = self.buf.clone();
                        Some(history.len() - 1)
                    }
                    Some(i) if i > 0 => Some(i - 1),
                    w => w,
                };
                if let Some(i) = next {
                    self.walk = Some(i);
                    self.show(&history[i]);
                }
            }
            Key::Down => match self.walk {
                Some(i) if i + 1 < history.len() => {
                    self.walk = Some(i + 1);
                    self.show(&history[i + 1]);
                }
                Some(_) => {
                    self.walk = None;
                    self.buf = std::mem::take(&mut self.typed);
                    self.cursor = self.buf.len();
                }
                None => {}
            },
            Key::Interrupt => return Outcome::Interrupted,
            Key::Other => {}
        }
        Outcome::Edit
    }
}

/// Why no line was read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Ctrl-C.
    Interrupted,
    /// End of input.
    Eof,
    /// The terminal failed.
    Io(std::io::Error),
}

/// The history file, `~/.csd_sql_history`.
pub(crate) fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".csd_sql_history"))
}

/// The terminal in raw mode until dropped.
struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    fn enter() -> std::io::Result<RawMode> {
        // SAFETY: termios is plain data; tcgetattr fills it for the terminal on fd 0.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a termios, fd 0.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let saved = t;
        t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        t.c_iflag &= !(libc::IXON | libc::ICRNL | libc::BRKINT | libc::INPCK | libc::ISTRIP);
        t.c_cc[libc::VMIN] = 1;
        t.c_cc[libc::VTIME] = 0;
        // SAFETY: as above.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the mode read in `enter`.
        unsafe {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &self.saved);
        }
    }
}

/// The shell's line editor: history in memory and (if it has a path) in a file.
pub(crate) struct Editor {
    history: Vec<String>,
    file: Option<PathBuf>,
}

impl Editor {
    /// An editor whose history is read from and appended to `file`.
    pub(crate) fn new(file: Option<PathBuf>) -> Editor {
        let mut history: Vec<String> = file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|s| s.lines().map(str::to_string).collect())
            .unwrap_or_default();
        if history.len() > HISTORY_MAX {
            history.drain(..history.len() - HISTORY_MAX);
        }
        Editor { history, file }
    }

    /// Adds a non-blank line (not repeating the last one) to the history and its file.
    pub(crate) fn add_history(&mut self, line: &str) {
        let line = line.trim_end();
        if line.trim().is_empty() || self.history.last().is_some_and(|l| l == line) {
            return;
        }
        self.history.push(line.to_string());
        if let Some(f) = &self.file {
            let r = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(f)
                .and_then(|mut h| writeln!(h, "{line}"));
            if let Err(e) = r {
                eprintln!("note: history not saved to {}: {e}", f.display());
                self.file = None;
            }
        }
    }

    /// Reads one line with `prompt` from the terminal.
    pub(crate) fn read_line(&mut self, prompt: &str) -> Result<String, ReadError> {
        let raw = RawMode::enter().map_err(ReadError::Io)?;
        let mut out = std::io::stdout();
        let mut state = LineState::default();
        let mut pending = Vec::new();
        let mut buf = [0u8; 64];
        redraw(&mut out, prompt, &state).map_err(ReadError::Io)?;
        let result = loop {
            let n = match std::io::stdin().read(&mut buf) {
                Ok(0) => break Err(ReadError::Eof),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(ReadError::Io(e)),
            };
            pending.extend_from_slice(&buf[..n]);
            let mut end = None;
            for k in parse_keys(&mut pending) {
                match state.key(k, &self.history) {
                    Outcome::Edit => {}
                    Outcome::Done(s) => {
                        end = Some(Ok(s));
                        break;
                    }
                    Outcome::Interrupted => {
                        end = Some(Err(ReadError::Interrupted));
                        break;
                    }
                    Outcome::Eof => {
                        end = Some(Err(ReadError::Eof));
                        break;
                    }
                }
            }
            if let Some(e) = end {
                break e;
            }
            redraw(&mut out, prompt, &state).map_err(ReadError::Io)?;
        };
        // The line as it ended stays on screen; the cursor goes to the next line.
        let _ = redraw(&mut out, prompt, &state);
        drop(raw);
        let _ = out.write_all(if matches!(result, Err(ReadError::Interrupted)) {
            b"^C\r\n"
        } else {
            b"\r\n"
        });
        let _ = out.flush();
        result
    }
}

/// Draws the prompt and the line, and puts the cursor in place.
fn redraw(out: &mut impl Write, prompt: &str, s: &LineState) -> std::io::Result<()> {
    let text = s.text();
    let back = text.chars().count() - s.cursor();
    write!(out, "\r{prompt}{text}\x1b[K")?;
    if back > 0 {
        write!(out, "\x1b[{back}D")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(s: &LineState, keys: &[Key], history: &[String]) -> (String, usize, LineState) {
        let mut st = LineState {
            buf: s.buf.clone(),
            cursor: s.cursor,
            walk: s.walk,
            typed: s.typed.clone(),
        };
        for &k in keys {
            st.key(k, history);
        }
        (st.text(), st.cursor(), st)
    }

    #[test]
    fn keys_decode_from_terminal_bytes() {
        let mut p = b"ab\x1b[A\x1b[3~\x7f\x01\r".to_vec();
        assert_eq!(
            parse_keys(&mut p),
            vec![
                Key::Char('a'),
                Key::Char('b'),
                Key::Up,
                Key::Delete,
                Key::Backspace,
                Key::Home,
                Key::Enter
            ]
        );
        assert!(p.is_empty());
        // An escape sequence or a UTF-8 character split across reads waits.
        let mut p = b"x\x1b[".to_vec();
        assert_eq!(parse_keys(&mut p), vec![Key::Char('x')]);
        p.extend_from_slice(b"D\xc3");
        assert_eq!(parse_keys(&mut p), vec![Key::Left]);
        p.push(0xa9);
        assert_eq!(parse_keys(&mut p), vec![Key::Char('é')]);
    }

    #[test]
    fn editing_moves_inserts_and_cuts() {
        let s = LineState::default();
        let keys: Vec<Key> = "SELCT".chars().map(Key::Char).collect();
        let (t, c, s) = typed(&s, &keys, &[]);
        assert_eq!((t.as_str(), c), ("SELCT", 5));
        let (t, _, s) = typed(&s, &[Key::Left, Key::Left, Key::Char('E')], &[]);
        assert_eq!(t, "SELECT");
        let (t, c, s) = typed(&s, &[Key::End, Key::Backspace, Key::Home, Key::Delete], &[]);
        assert_eq!((t.as_str(), c), ("ELEC", 0));
        let (t, _, s) = typed(&s, &[Key::Right, Key::CutAfter], &[]);
        assert_eq!(t, "E");
        let (t, c, _) = typed(&s, &[Key::CutBefore], &[]);
        assert_eq!((t.as_str(), c), ("", 0));
    }

    #[test]
    fn history_walks_back_and_returns_to_the_typed_line() {
        let h = vec!["one".to_string(), "two".to_string()];
        let mut s = LineState::default();
        s.key(Key::Char('x'), &h);
        s.key(Key::Up, &h);
        assert_eq!(s.text(), "two");
        s.key(Key::Up, &h);
        s.key(Key::Up, &h);
        assert_eq!(s.text(), "one");
        s.key(Key::Down, &h);
        assert_eq!(s.text(), "two");
        s.key(Key::Down, &h);
        assert_eq!(s.text(), "x");
        assert_eq!(s.key(Key::Enter, &h), Outcome::Done("x".into()));
    }

    #[test]
    fn ctrl_d_ends_input_only_on_an_empty_line() {
        let mut s = LineState::default();
        assert_eq!(s.key(Key::CtrlD, &[]), Outcome::Eof);
        s.key(Key::Char('a'), &[]);
        s.key(Key::Home, &[]);
        assert_eq!(s.key(Key::CtrlD, &[]), Outcome::Edit);
        assert_eq!(s.text(), "");
        assert_eq!(s.key(Key::Interrupt, &[]), Outcome::Interrupted);
    }

    #[test]
    fn history_file_is_appended_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("h");
        let mut e = Editor::new(Some(f.clone()));
        e.add_history("SELECT 1;");
        e.add_history("SELECT 1;");
        e.add_history("   ");
        e.add_history("\\d");
        let e2 = Editor::new(Some(f));
        assert_eq!(e2.history, vec!["SELECT 1;".to_string(), "\\d".to_string()]);
    }
}
