//! The shape of a metric declaration, shared by every crate that records metrics.
//!
//! Each crate declares each of its metrics once, as a [`Metric`] constant (name, kind, unit,
//! help text, labels with their values, histogram buckets), and its label values as an enum
//! made by [`label_values!`](crate::label_values), so a value outside the declared set cannot
//! be written. The loader derives from these declarations the descriptions, the exporter's
//! buckets and the table of docs/metrics.md. Pure data: this module records nothing.

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets.
    Histogram,
}

impl Kind {
    /// The Prometheus type name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// A metric's unit, when it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
}

/// One label of a metric and the values it takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Label {
    /// The label's name.
    pub name: &'static str,
    /// Every value it takes; empty for an open set (a version string), described in the
    /// metric's note.
    pub values: &'static [&'static str],
}

/// One metric, declared once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// The family name as scraped (without `_bucket`/`_count`/`_sum`).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The unit, if any.
    pub unit: Option<Unit>,
    /// The help text the exporter shows.
    pub help: &'static str,
    /// Its labels, in the order they are recorded.
    pub labels: &'static [Label],
    /// A histogram's bucket bounds (empty for counters and gauges).
    pub buckets: &'static [f64],
    /// What the documentation adds to the help text (empty for nothing).
    pub note: &'static str,
}

impl Metric {
    /// A counter, gauge or histogram with no unit, labels, buckets or note.
    pub const fn new(name: &'static str, kind: Kind, help: &'static str) -> Self {
        Self {
            name,
            kind,
            unit: None,
            help,
            labels: &[],
            buckets: &[],
            note: "",
        }
    }

    /// With a unit.
    pub const fn unit(mut self, unit: Unit) -> Self {
        self.unit = Some(unit);
        self
    }

    /// With labels.
    pub const fn labels(mut self, labels: &'static [Label]) -> Self {
        self.labels = labels;
        self
    }

    /// With histogram buckets.
    pub const fn buckets(mut self, buckets: &'static [f64]) -> Self {
        self.buckets = buckets;
        self
    }

    /// With a note for the documentation.
    pub const fn note(mut self, note: &'static str) -> Self {
        self.note = note;
        self
    }
}

/// Declares a label's values as an enum: `ALL` (in declaration order, so `value as usize`
/// indexes it), `LABEL` (the [`Label`] for a declaration) and `as_str`.
///
/// Not `strum`: its `IntoStaticStr`, `VariantNames` and `VariantArray` derives would give the
/// strings and the variant list, but not the label's own name, so `LABEL` would still need
/// this macro (or a hand-written impl per enum); they would replace about ten lines here with
/// a proc-macro dependency (`strum_macros`, `syn`) in the crate every other crate builds on.
///
/// ```
/// mmcache_metrics::label_values! {
///     /// How an operation ended.
///     pub enum Outcome: "outcome" { Ok = "ok", Error = "error" }
/// }
/// assert_eq!(Outcome::Error.as_str(), "error");
/// assert_eq!(Outcome::LABEL.values, ["ok", "error"]);
/// assert_eq!(Outcome::ALL[Outcome::Error as usize], Outcome::Error);
/// ```
#[macro_export]
macro_rules! label_values {
    ($(#[$meta:meta])* $vis:vis enum $name:ident : $label:literal {
        $($(#[$vmeta:meta])* $variant:ident = $value:literal),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* #[doc = concat!("`", $value, "`")] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];
            /// The label and its values, for a metric declaration.
            pub const LABEL: $crate::metric::Label =
                $crate::metric::Label { name: $label, values: &[$($value),+] };

            /// The label value.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value),+
                }
            }
        }
    };
}
