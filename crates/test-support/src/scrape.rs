//! Reading a Prometheus text scrape in tests and examples.

/// The value of counter `name` summed over its series whose labels include every one of
/// `labels` (each written as in the scrape, e.g. `tier="disk"`); 0 when none.
pub fn counter(scrape: &str, name: &str, labels: &[&str]) -> u64 {
    scrape
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn sums_the_matching_series_of_one_counter() {
        let scrape = "# HELP a_total x\n\
                      a_total{tier=\"disk\",reason=\"x\"} 2\n\
                      a_total{tier=\"shared\",reason=\"x\"} 3\n\
                      a_total_more{tier=\"disk\"} 7\n\
                      a_total{tier=\"disk\",reason=\"y\"} 1\n";
        assert_eq!(super::counter(scrape, "a_total", &["tier=\"disk\""]), 3);
        assert_eq!(super::counter(scrape, "a_total", &[]), 6);
        assert_eq!(super::counter(scrape, "b_total", &[]), 0);
    }
}
