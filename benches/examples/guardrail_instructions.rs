//! A driver for counting the guardrail path's instructions under
//! callgrind (load-independent): `guardrail_instructions CASE N` runs CASE
//! N times after one warm-up run; the instructions of one run are
//! (count at N - count at 0) / N. Cases: `pre:KB` (`pre_call` of a chat
//! request of four user messages of `loadgen`'s filler prose, about KB
//! kilobytes in all), `answer` (`post_call` on the mock's 16-token chat
//! answer), `stream` (the mock's 16-token stream, 17 chunks and `[DONE]`,
//! through the relay's usage tap and the stream window as
//! `proxy::guard` runs it: each chunk's text found in place, fed to the
//! window and spliced back) and `tap` (the usage tap alone on it).

use benches::guardrail_inputs::{filler_request, mock_answer, mock_stream, post_call, rails};
use gateway::guardrails::Scope;
use std::hint::black_box;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().expect("a case");
    let n: usize = args.next().map_or(1, |n| n.parse().unwrap());
    let rails = rails();
    let post = post_call(&rails);
    let mut run: Box<dyn FnMut()> = match case.as_str() {
        "answer" => {
            let body = mock_answer();
            Box::new(move || {
                let mut log = Default::default();
                black_box(post.answer(&body, &mut log).unwrap().len());
            })
        }
        "stream" => {
            let body = mock_stream();
            Box::new(move || {
                let mut tap = gateway::spend::StreamUsage::new();
                tap.feed(&body);
                let mut guard = gateway::proxy::bench::StreamGuard::new(&post);
                let mut out = Vec::with_capacity(body.len());
                guard.feed(&body, &mut out);
                black_box((tap.finish(|| 0).0.completion_tokens, out.len()));
            })
        }
        "tap" => {
            let body = mock_stream();
            Box::new(move || {
                let mut tap = gateway::spend::StreamUsage::new();
                tap.feed(&body);
                black_box(tap.finish(|| 0).0.completion_tokens);
            })
        }
        pre => {
            let kb: usize = pre.strip_prefix("pre:").expect("a case").parse().unwrap();
            let body = filler_request(kb << 10);
            Box::new(move || {
                let mut log = Default::default();
                let (out, _) = rails
                    .pre_call(Scope::default(), body.clone(), &mut log)
                    .unwrap();
                black_box(out.len());
            })
        }
    };
    run();
    for _ in 0..n {
        run();
    }
}
