//! USD from tokens and prices: what a finished request spent, and the most
//! an admitted request could spend.

use super::prices::Price;
use super::usage::Usage;

/// USD spent by a finished request, to charge keys, users, teams and
/// budgets: prompt tokens read from or written to the provider's cache at
/// their own prices (LiteLLM's formula), the rest at the input price; a
/// rerank call's search units at the per-query price.
pub fn cost(usage: Usage, price: Price) -> f64 {
    let cached = usage.cached_tokens.min(usage.prompt_tokens);
    let created = usage
        .cache_creation_tokens
        .min(usage.prompt_tokens - cached);
    let plain = usage.prompt_tokens - cached - created;
    let input = price.input_per_token;
    plain as f64 * input
        + cached as f64 * price.cache_read_per_token.unwrap_or(input)
        + created as f64 * price.cache_creation_per_token.unwrap_or(input)
        + usage.completion_tokens as f64 * price.output_per_token
        + usage.search_units as f64 * price.per_query.unwrap_or(0.0)
}

/// USD for the time a call took on a deployment billed by the second
/// (`per_second`); 0 for the rest. Not reserved at admission: the duration
/// is unknown until the call ends.
pub fn time_cost(elapsed: std::time::Duration, price: Price) -> f64 {
    price.per_second.map_or(0.0, |p| p * elapsed.as_secs_f64())
}

/// The most a request can cost, reserved against a budget at admission so
/// concurrent requests cannot overspend it: the estimated prompt at the
/// dearest prompt price (a cache write can cost more than plain input) plus
/// the full completion cap.
pub fn worst_case_cost(prompt_estimate: u64, max_output: u64, price: Price) -> f64 {
    let prompt_price = price
        .input_per_token
        .max(price.cache_read_per_token.unwrap_or(0.0))
        .max(price.cache_creation_per_token.unwrap_or(0.0));
    prompt_estimate as f64 * prompt_price + max_output as f64 * price.output_per_token
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRICE: Price = Price {
        input_per_token: 2.5e-6,
        output_per_token: 10e-6,
        cache_read_per_token: None,
        cache_creation_per_token: None,
        per_second: None,
        per_query: None,
    };

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn cost_of_usage() {
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 500,
            ..Default::default()
        };
        assert!(close(cost(usage, PRICE), 2.5 + 0.005));
        assert_eq!(cost(Usage::default(), PRICE), 0.0);
        assert_eq!(cost(usage, Price::default()), 0.0);
    }

    #[test]
    fn worst_case_covers_the_full_completion_cap() {
        assert!(close(worst_case_cost(400, 16_384, PRICE), 0.001 + 0.16384));
        assert_eq!(worst_case_cost(400, 0, Price::default()), 0.0);
        let usage = Usage {
            prompt_tokens: 400,
            completion_tokens: 16_384,
            ..Default::default()
        };
        assert_eq!(worst_case_cost(400, 16_384, PRICE), cost(usage, PRICE));
    }

    #[test]
    fn search_units_are_billed_per_query() {
        let rerank = Price {
            per_query: Some(0.002),
            ..Default::default()
        };
        let usage = Usage {
            prompt_tokens: 40,
            search_units: 2,
            ..Default::default()
        };
        assert!(close(cost(usage, rerank), 0.004));
        assert_eq!(cost(usage, PRICE), 40.0 * 2.5e-6, "no per-query price");
    }

    #[test]
    fn time_is_billed_by_the_second() {
        let timed = Price {
            per_second: Some(0.5),
            ..Default::default()
        };
        let secs = std::time::Duration::from_millis(1_500);
        assert!(close(time_cost(secs, timed), 0.75));
        assert_eq!(time_cost(secs, PRICE), 0.0);
    }

    #[test]
    fn cached_and_cache_creation_tokens_have_their_own_prices() {
        let price = Price {
            input_per_token: 3e-6,
            output_per_token: 15e-6,
            cache_read_per_token: Some(0.3e-6),
            cache_creation_per_token: Some(3.75e-6),
            per_second: None,
            per_query: None,
        };
        let usage = Usage {
            prompt_tokens: 1_000 + 10_000 + 2_000,
            completion_tokens: 100,
            cached_tokens: 10_000,
            cache_creation_tokens: 2_000,
            ..Usage::default()
        };
        let want = 1_000.0 * 3e-6 + 10_000.0 * 0.3e-6 + 2_000.0 * 3.75e-6 + 100.0 * 15e-6;
        assert!(close(cost(usage, price), want));
        // Without cache prices, cached tokens cost the input price.
        assert!(close(cost(usage, PRICE), 13_000.0 * 2.5e-6 + 100.0 * 10e-6));
        // Inconsistent counts never go negative.
        let odd = Usage {
            prompt_tokens: 5,
            cached_tokens: 9,
            cache_creation_tokens: 9,
            ..Default::default()
        };
        assert!(close(cost(odd, price), 5.0 * 0.3e-6));
        assert!(close(worst_case_cost(10, 0, price), 10.0 * 3.75e-6));
    }
}
