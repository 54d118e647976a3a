//! The table that closes a run over several stacks: one row per stack, in the order they
//! were listed, with what was found or why the stack could not be checked, as aligned text
//! (coloured on a terminal) and as a Markdown table. A failed stack is a row like the
//! others, so it can never hide the drift of the rest.

use datum_report::markdown::{Table, cell, inline_code};

use super::text::Paint;
use crate::classify::{Category, Report};

/// One stack's line of the summary.
pub struct Row<'a> {
    pub name: &'a str,
    /// The report and the stack's exit code, or the error that stopped it.
    pub outcome: Result<(&'a Report, u8), &'a str>,
}

impl Row<'_> {
    fn result_word(&self) -> &'static str {
        match self.outcome {
            Err(_) => "error",
            Ok((_, 0)) => "clean",
            Ok(_) => "drift",
        }
    }

    fn counts(&self) -> Vec<String> {
        match self.outcome {
            Err(_) => vec!["-".to_owned(); 6],
            Ok((r, _)) => vec![
                r.actionable().to_string(),
                r.count(Category::Replaced).to_string(),
                r.count(Category::DeletedOutside).to_string(),
                r.count(Category::ChangedOutside).to_string(),
                r.count(Category::Ignored).to_string(),
                r.pending.len().to_string(),
            ],
        }
    }

    /// The code this stack alone would exit with.
    pub fn exit(&self) -> u8 {
        match self.outcome {
            Err(_) => crate::exit::ERROR,
            Ok((_, code)) => code,
        }
    }

    fn last_column(&self) -> String {
        match self.outcome {
            Err(message) => message.to_owned(),
            Ok((r, _)) => r.fingerprint(),
        }
    }
}

const HEADER: [&str; 10] = [
    "stack",
    "result",
    "exit",
    "actionable",
    "replaced",
    "deleted",
    "changed",
    "ignored",
    "pending",
    "fingerprint / error",
];

/// The aligned text table (numbers right-aligned), ending with a newline.
pub fn text(rows: &[Row<'_>], colour: bool) -> String {
    let paint = Paint { on: colour };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let mut line = vec![
                row.name.to_owned(),
                row.result_word().to_owned(),
                row.exit().to_string(),
            ];
            line.extend(row.counts());
            line.push(row.last_column());
            line
        })
        .collect();
    let mut widths: Vec<usize> = HEADER.iter().map(|h| h.chars().count()).collect();
    for line in &cells {
        for (w, c) in widths.iter_mut().zip(line) {
            *w = (*w).max(c.chars().count());
        }
    }
    let last = HEADER.len() - 1;
    let pad = |text: &str, i: usize| -> String {
        let fill = " ".repeat(widths[i].saturating_sub(text.chars().count()));
        if i == last {
            text.to_owned()
        } else if (2..last).contains(&i) {
            format!("{fill}{text}")
        } else {
            format!("{text}{fill}")
        }
    };
    let mut out = String::new();
    let header: Vec<String> = HEADER.iter().enumerate().map(|(i, h)| pad(h, i)).collect();
    out.push_str(&paint.wrap("1", header.join("  ").trim_end()));
    out.push('\n');
    for (row, line) in rows.iter().zip(&cells) {
        let shown: Vec<String> = line
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let padded = pad(c, i);
                if i == 1 {
                    let code = match row.outcome {
                        Err(_) => "31",
                        Ok((_, 0)) => "32",
                        Ok(_) => "33",
                    };
                    paint.wrap(code, &padded)
                } else {
                    padded
                }
            })
            .collect();
        out.push_str(shown.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The Markdown table, ending with a newline.
pub fn markdown(rows: &[Row<'_>]) -> String {
    let mut table = Table::new(&HEADER);
    for row in rows {
        let mut line = vec![
            inline_code(row.name),
            cell(row.result_word()),
            cell(&row.exit().to_string()),
        ];
        line.extend(row.counts().iter().map(|c| cell(c)));
        line.push(match row.outcome {
            Err(message) => super::markdown::outside_text(message),
            Ok((r, _)) => inline_code(&r.fingerprint()),
        });
        table.row_markdown(line);
    }
    table.render()
}

/// The worst exit code of a run: any error is 1, else any drift is 2, else 0.
pub fn worst_exit(rows: &[Row<'_>]) -> u8 {
    let codes: Vec<u8> = rows.iter().map(Row::exit).collect();
    if codes.contains(&crate::exit::ERROR) {
        crate::exit::ERROR
    } else if codes.contains(&crate::exit::DRIFT) {
        crate::exit::DRIFT
    } else {
        crate::exit::CLEAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(stack: &str) -> Report {
        crate::classify::classify(
            stack,
            &crate::plan::Plan::default(),
            None,
            &crate::rules::Rules::default(),
            &crate::classify::Options::default(),
        )
    }

    #[test]
    fn rows_align_and_the_worst_code_wins() {
        let clean = report("network");
        let drifted = report("shop-prod");
        let rows = [
            Row {
                name: "network",
                outcome: Ok((&clean, 0)),
            },
            Row {
                name: "shop-prod",
                outcome: Ok((&drifted, 2)),
            },
            Row {
                name: "broken",
                outcome: Err("refresh-only plan failed (exit 1): Error: x"),
            },
        ];
        let text = text(&rows, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "stack      result  exit  actionable  replaced  deleted  changed  ignored  pending  fingerprint / error"
        );
        assert_eq!(
            lines[3],
            "broken     error      1           -         -        -        -        -        -  refresh-only plan failed (exit 1): Error: x"
        );
        assert!(lines[1].starts_with("network    clean      0           0"));
        assert_eq!(worst_exit(&rows), 1);
        assert_eq!(worst_exit(&rows[..2]), 2);
        assert_eq!(worst_exit(&rows[..1]), 0);
        let coloured = super::text(&rows, true);
        assert!(coloured.contains("\x1b[31merror \x1b[0m"), "{coloured}");
        let md = markdown(&rows);
        assert!(md.contains("| `broken` | error | 1 | - |"), "{md}");
    }
}
