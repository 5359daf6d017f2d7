//! USD from tokens and prices: what a finished request spent, and the most
//! an admitted request could spend.

use super::prices::Price;
use super::usage::Usage;

/// USD spent by a finished request, to charge keys, users, teams and
/// budgets.
pub fn cost(usage: Usage, price: Price) -> f64 {
    usage.prompt_tokens as f64 * price.input_per_token
        + usage.completion_tokens as f64 * price.output_per_token
}

/// The most a request can cost, reserved against a budget at admission so
/// concurrent requests cannot overspend it: the estimated prompt plus the
/// full completion cap.
pub fn worst_case_cost(prompt_estimate: u64, max_output: u64, price: Price) -> f64 {
    prompt_estimate as f64 * price.input_per_token + max_output as f64 * price.output_per_token
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRICE: Price = Price {
        input_per_token: 2.5e-6,
        output_per_token: 10e-6,
    };

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn cost_of_usage() {
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 500,
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
        };
        assert_eq!(worst_case_cost(400, 16_384, PRICE), cost(usage, PRICE));
    }
}
