//! SVG plots drawn on the server: a line per series over time, with the
//! latest value and the largest in the legend. No script, no asset: a plot is
//! part of the page it is on.

use maud::{html, Markup};

/// Plot size in SVG units (it scales to its box).
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 160.0;
/// Most points a line is drawn with (the day's 1,440 samples are thinned).
const MAX_POINTS: usize = 720;

/// One line: a name, a CSS class and its (time, value) points, oldest first.
pub struct Series<'a> {
    pub name: &'a str,
    pub class: &'a str,
    pub points: Vec<(u64, f64)>,
}

/// A time plot of `series`; `format` renders a value for the legend and axis.
pub fn time_plot(title: &str, series: &[Series<'_>], format: fn(f64) -> String) -> Markup {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let first = all().map(|p| p.0).min();
    let last = all().map(|p| p.0).max();
    let top = all().map(|p| p.1).fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let (from, to) = match (first, last) {
        (Some(from), Some(to)) if to > from => (from, to),
        (Some(at), _) => (at.saturating_sub(1), at),
        _ => (0, 1),
    };
    let x = |t: u64| (t - from) as f64 / (to - from) as f64 * WIDTH;
    let y = |v: f64| HEIGHT - v / top * HEIGHT;
    html! {
        figure.plot data-title=(title) {
            figcaption { (title) }
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) preserveAspectRatio="none" role="img" aria-label=(title) {
                line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
                @for s in series {
                    @let step = s.points.len().div_ceil(MAX_POINTS).max(1);
                    @let drawn: Vec<String> = s.points.iter().step_by(step)
                        .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v))).collect();
                    polyline class=(s.class) data-series=(s.name) data-points=(drawn.len())
                        points=(drawn.join(" ")) {}
                }
            }
            ul.legend {
                li.scale { "scale " (format(top / 1.1)) }
                @for s in series {
                    li class=(s.class) {
                        (s.name) ": " (s.points.last().map_or("-".to_string(), |p| format(p.1)))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_draws_each_series_scaled_to_the_largest_value() {
        let plot = time_plot(
            "IOPS",
            &[
                Series {
                    name: "read",
                    class: "read",
                    points: vec![(100, 10.0), (105, 20.0), (110, 0.0)],
                },
                Series {
                    name: "write",
                    class: "write",
                    points: vec![(100, 5.0)],
                },
            ],
            |v| format!("{v:.0}"),
        )
        .into_string();
        assert!(
            plot.contains(r#"data-series="read" data-points="3""#),
            "{plot}"
        );
        assert!(
            plot.contains(r#"points="0.0,87.3 300.0,14.5 600.0,160.0""#),
            "{plot}"
        );
        assert!(
            plot.contains("read: 0") && plot.contains("write: 5") && plot.contains("scale 20"),
            "{plot}"
        );
        let empty = time_plot("none", &[], |v| format!("{v}")).into_string();
        assert!(empty.contains("<svg"), "{empty}");
    }
}
