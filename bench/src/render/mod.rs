//! The benchmark's own reports, from the data types its modes return: `validation.md`
//! ([`validation`]) and `overhead.md` ([`overhead`]). The profiler's reports (rankings,
//! flamegraphs, pages, summaries) are `profiler::render`'s.

pub mod overhead;
pub mod validation;
