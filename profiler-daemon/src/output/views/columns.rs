//! The column machinery: each column of a view declared once (its name, heading, alignment
//! and value), typed cells, and the table, CSV and JSON rendered from those declarations.
//!
//! A column's name is its JSON key, its CSV heading and what `--select` names; its heading is
//! the table's. Its value is a [`Cell`] computed from the row when the output needs it: the
//! cell's kind decides how a table shows it (bytes and times in human units), while CSV and
//! JSON get the value itself.

use crate::output::fmt::{self, Align};
use serde_json::{Value, json};

/// The type of the rows a list of columns reads. An implementor (a unit struct per view)
/// names the row type, which may borrow from the report (`Row<'a>` holds `&'a` references):
/// that way a view's columns are constants while its rows are built per report.
pub trait Rows {
    type Row<'a>;
}

/// One value of a row, typed: its kind decides how a table shows it; CSV and JSON get the value
/// itself ([`Cell::to_json`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// Nothing to show: `-` in a table, empty in CSV, `null` in JSON.
    Null,
    Int(u64),
    Bool(bool),
    Text(String),
    Bytes(u64),
    /// Bytes per second: `2.0 GiB/s`.
    ByteRate(f64),
    /// Nanoseconds, shown as milliseconds.
    Ms(u64),
    /// Nanoseconds, shown as microseconds.
    Us(u64),
    /// Nanoseconds after the capture started, shown as seconds with one decimal.
    Secs(u64),
    /// Calls per second.
    Rate(f64),
    /// A fraction, shown as a percentage.
    Share(f64),
    /// Counts, shown `a/b/c` (an array in JSON).
    Counts(Vec<u64>),
    /// A structure only JSON shows whole (a step series, timeline bins), built when the
    /// column is read; a table and CSV print its JSON text.
    Json(Value),
}

impl Cell {
    pub fn text(s: &str) -> Cell {
        Cell::Text(s.to_owned())
    }

    /// `f(v)`, or [`Cell::Null`] without a value.
    pub fn or_null<T>(v: Option<T>, f: impl FnOnce(T) -> Cell) -> Cell {
        v.map_or(Cell::Null, f)
    }

    /// The value as a number, for ordering (`None` for text and nothing).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Cell::Int(n) | Cell::Bytes(n) | Cell::Ms(n) | Cell::Us(n) | Cell::Secs(n) => {
                Some(n as f64)
            }
            Cell::ByteRate(f) | Cell::Rate(f) | Cell::Share(f) => Some(f),
            Cell::Null | Cell::Bool(_) | Cell::Text(_) | Cell::Counts(_) | Cell::Json(_) => None,
        }
    }

    /// The value itself, for JSON (and CSV).
    pub fn to_json(&self) -> Value {
        match self {
            Cell::Null => Value::Null,
            Cell::Int(n) | Cell::Bytes(n) | Cell::Ms(n) | Cell::Us(n) | Cell::Secs(n) => json!(n),
            Cell::Bool(b) => json!(b),
            Cell::Text(s) => json!(s),
            Cell::ByteRate(f) | Cell::Rate(f) | Cell::Share(f) => json!(f),
            Cell::Counts(v) => json!(v),
            Cell::Json(v) => v.clone(),
        }
    }

    /// The value for people: bytes and times in human units.
    fn human(&self) -> String {
        match self {
            Cell::Null => "-".to_owned(),
            Cell::Int(n) => n.to_string(),
            Cell::Bool(b) => b.to_string(),
            Cell::Text(s) => s.clone(),
            Cell::Bytes(n) => fmt::bytes(*n),
            Cell::ByteRate(f) => format!("{}/s", fmt::bytes(*f as u64)),
            Cell::Ms(n) => fmt::ms(*n),
            Cell::Us(n) => fmt::us(*n),
            Cell::Secs(n) => format!("{:.1}", *n as f64 / 1e9),
            Cell::Rate(f) => fmt::rate(*f),
            Cell::Share(f) => format!("{:.1}%", f * 100.0),
            Cell::Counts(v) => v.iter().map(u64::to_string).collect::<Vec<_>>().join("/"),
            Cell::Json(v) => v.to_string(),
        }
    }
}

/// Which outputs show a column when `--select` does not name the columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    Always,
    /// Left out of tables, to fit 80 columns.
    Wide,
    /// Only in JSON (a whole series).
    JsonOnly,
}

/// How a column is laid out: [`LEFT`] (text) or [`RIGHT`] (figures), cut, shown by default.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub align: Align,
    pub show: Show,
    /// A table cuts longer text to this many characters (`…` last).
    pub cut: Option<usize>,
}

/// Text: aligned left.
pub const LEFT: Style = Style {
    align: Align::Left,
    show: Show::Always,
    cut: None,
};

/// Figures: aligned right.
pub const RIGHT: Style = Style {
    align: Align::Right,
    ..LEFT
};

impl Style {
    /// Left out of tables unless selected.
    pub const fn wide(self) -> Style {
        Style {
            show: Show::Wide,
            ..self
        }
    }

    /// Only in JSON unless selected.
    pub const fn json_only(self) -> Style {
        Style {
            show: Show::JsonOnly,
            ..self
        }
    }

    /// Tables cut the text to `max` characters.
    pub const fn cut(self, max: usize) -> Style {
        Style {
            cut: Some(max),
            ..self
        }
    }
}

/// One column of a view, over the rows of `S`.
pub struct Column<S: Rows> {
    /// The JSON key, the CSV heading and the `--select` name.
    pub name: &'static str,
    /// The table's heading.
    pub header: &'static str,
    pub style: Style,
    /// The value.
    pub get: for<'a, 'r> fn(&'r S::Row<'a>) -> Cell,
}

impl<S: Rows> Column<S> {
    /// The column `name` (headed `header` in tables, laid out as `style`) whose value is `get`.
    pub const fn new(
        name: &'static str,
        header: &'static str,
        style: Style,
        get: for<'a, 'r> fn(&'r S::Row<'a>) -> Cell,
    ) -> Self {
        Column {
            name,
            header,
            style,
            get,
        }
    }

    /// What a table shows for `row`.
    fn human(&self, row: &S::Row<'_>) -> String {
        let s = (self.get)(row).human();
        match self.style.cut {
            Some(max) => fmt::truncate(&s, max),
            None => s,
        }
    }
}

/// Every column of `cols`, to render them all.
pub fn all<S: Rows>(cols: &[Column<S>]) -> Vec<&Column<S>> {
    cols.iter().collect()
}

/// A text table of `rows` in `cols` (see [`fmt::table`]), each line starting with `indent`.
pub fn table<S: Rows>(indent: &str, cols: &[&Column<S>], rows: &[S::Row<'_>]) -> String {
    let heads: Vec<&str> = cols.iter().map(|c| c.header).collect();
    let align: Vec<Align> = cols.iter().map(|c| c.style.align).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| cols.iter().map(|c| c.human(row)).collect())
        .collect();
    fmt::table(indent, &heads, &align, &cells)
}

/// CSV: a heading line of the columns' names, then a line per row.
pub fn csv<S: Rows>(cols: &[&Column<S>], rows: &[S::Row<'_>]) -> String {
    let names: Vec<&str> = cols.iter().map(|c| c.name).collect();
    let mut out = names.join(",") + "\n";
    for row in rows {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| csv_cell(&(c.get)(row).to_json()))
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// JSON: an array of one object per row, keyed by the columns' names.
pub fn json<S: Rows>(cols: &[&Column<S>], rows: &[S::Row<'_>]) -> String {
    let arr: Vec<Value> = rows
        .iter()
        .map(|row| {
            let mut m = serde_json::Map::new();
            for c in cols {
                m.insert(c.name.to_owned(), (c.get)(row).to_json());
            }
            Value::Object(m)
        })
        .collect();
    serde_json::to_string_pretty(&Value::Array(arr)).unwrap_or_default() + "\n"
}

/// A CSV cell: nothing for `null`, text as is, quoted when it holds a comma, quote or newline.
fn csv_cell(v: &Value) -> String {
    let s = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pairs;

    impl Rows for Pairs {
        type Row<'a> = (&'a str, Option<u64>);
    }

    const COLS: &[Column<Pairs>] = &[
        Column::new("name", "NAME", LEFT.cut(5), |r| Cell::text(r.0)),
        Column::new("bytes", "BYTES", RIGHT, |r| Cell::or_null(r.1, Cell::Bytes)),
    ];

    #[test]
    fn one_declaration_three_outputs() {
        let rows = [("a, \"b\" c", Some(1536)), ("d", None)];
        let cols: Vec<&Column<Pairs>> = COLS.iter().collect();
        assert_eq!(
            table("", &cols, &rows),
            "NAME     BYTES\na, \"…  1.5 KiB\nd            -\n"
        );
        assert_eq!(
            csv(&cols, &rows),
            "name,bytes\n\"a, \"\"b\"\" c\",1536\nd,\n"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&json(&cols, &rows)).unwrap(),
            json!([{"name": "a, \"b\" c", "bytes": 1536}, {"name": "d", "bytes": null}])
        );
    }

    #[test]
    fn cells_for_people() {
        let human = |c: Cell| c.human();
        assert_eq!(human(Cell::ByteRate(2_097_152_000.0)), "2.0 GiB/s");
        assert_eq!(human(Cell::Ms(1_234_567)), "1.235");
        assert_eq!(human(Cell::Us(49_919)), "49.9");
        assert_eq!(human(Cell::Secs(2_500_000_000)), "2.5");
        assert_eq!(human(Cell::Share(0.6666)), "66.7%");
        assert_eq!(human(Cell::Counts(vec![0, 2, 1])), "0/2/1");
        assert_eq!(human(Cell::Null), "-");
        assert_eq!(Cell::Ms(5).to_json(), json!(5));
        assert_eq!(Cell::Rate(25.0).to_json().to_string(), "25.0");
    }
}
