//! The one `data_impact` mapping (SPEC F11): how much the failure of a kind
//! of source harms a kind of task. Tools never pick their own impact level.

use attest_protocol::{DataImpact, DataSource, TaskType};

/// The impact of `source` failing on a task of type `task`. Deterministic:
/// a pure table, every pair listed, pinned by a test.
pub fn data_impact(task: TaskType, source: DataSource) -> DataImpact {
    use DataImpact::{Blocking, High, Low, Medium, None};
    use DataSource as S;
    use TaskType as T;
    match (task, source) {
        // Unknown task: any missing data matters somewhat; a failed send
        // matters little to a task that was not about sending.
        (T::General, S::Delivery) => Low,
        (T::General, _) => Medium,

        // A plain answer may lean on any source.
        (T::Answer, S::Delivery) => None,
        (T::Answer, _) => Medium,

        // Reporting what is there: the observation is the task.
        (T::Observe, S::Delivery) => None,
        (T::Observe, _) => High,

        // Changing files: the workspace is the task, commands verify it.
        (T::Mutate, S::Workspace) => Blocking,
        (T::Mutate, S::Command) => High,
        (T::Mutate, S::Delivery) => None,
        (T::Mutate, S::Network) => Low,
        (T::Mutate, S::RealtimeQuote | S::News | S::Financials) => Low,

        // Sending: the send is the task; what goes into it matters too.
        (T::Deliver, S::Delivery) => Blocking,
        (T::Deliver, S::Workspace | S::Command | S::Network) => Medium,
        (T::Deliver, S::RealtimeQuote | S::News | S::Financials) => Medium,

        // Seed 003 P5: a realtime quote failing blocks intraday advice.
        (T::IntradayTrading, S::RealtimeQuote) => Blocking,
        (T::IntradayTrading, S::News) => High,
        (T::IntradayTrading, S::Financials) => Low,
        (T::IntradayTrading, S::Network) => Medium,
        (T::IntradayTrading, S::Workspace | S::Command | S::Delivery) => Low,

        // ...and is only medium for long-term fundamentals.
        (T::LongTermFundamental, S::RealtimeQuote) => Medium,
        (T::LongTermFundamental, S::News) => Medium,
        (T::LongTermFundamental, S::Financials) => High,
        (T::LongTermFundamental, S::Network) => Medium,
        (T::LongTermFundamental, S::Workspace | S::Command | S::Delivery) => Low,

        // News failing is high for event-driven analysis...
        (T::EventDriven, S::News) => High,
        (T::EventDriven, S::RealtimeQuote) => Medium,
        (T::EventDriven, S::Financials) => Low,
        (T::EventDriven, S::Network) => Medium,
        (T::EventDriven, S::Workspace | S::Command | S::Delivery) => Low,

        // ...and low for pure technical analysis, which needs prices.
        (T::TechnicalAnalysis, S::News) => Low,
        (T::TechnicalAnalysis, S::RealtimeQuote) => Blocking,
        (T::TechnicalAnalysis, S::Financials) => None,
        (T::TechnicalAnalysis, S::Network) => Medium,
        (T::TechnicalAnalysis, S::Workspace | S::Command | S::Delivery) => Low,

        // Financial statements failing blocks a valuation...
        (T::Valuation, S::Financials) => Blocking,
        (T::Valuation, S::RealtimeQuote) => High,
        (T::Valuation, S::News) => Low,
        (T::Valuation, S::Network) => Medium,
        (T::Valuation, S::Workspace | S::Command | S::Delivery) => Low,

        // ...and is medium for a short-term price task.
        (T::ShortTermPrice, S::Financials) => Medium,
        (T::ShortTermPrice, S::RealtimeQuote) => Blocking,
        (T::ShortTermPrice, S::News) => Medium,
        (T::ShortTermPrice, S::Network) => Medium,
        (T::ShortTermPrice, S::Workspace | S::Command | S::Delivery) => Low,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataImpact::{Blocking as B, High as H, Low as L, Medium as M, None as N};

    /// Every (task, source) pair, written out. Columns follow
    /// `DataSource::ALL`: workspace, command, network, delivery,
    /// realtime_quote, news, financials.
    const TABLE: [(TaskType, [DataImpact; 7]); 11] = [
        (TaskType::General, [M, M, M, L, M, M, M]),
        (TaskType::Answer, [M, M, M, N, M, M, M]),
        (TaskType::Observe, [H, H, H, N, H, H, H]),
        (TaskType::Mutate, [B, H, L, N, L, L, L]),
        (TaskType::Deliver, [M, M, M, B, M, M, M]),
        (TaskType::IntradayTrading, [L, L, M, L, B, H, L]),
        (TaskType::LongTermFundamental, [L, L, M, L, M, M, H]),
        (TaskType::EventDriven, [L, L, M, L, M, H, L]),
        (TaskType::TechnicalAnalysis, [L, L, M, L, B, L, N]),
        (TaskType::Valuation, [L, L, M, L, H, L, B]),
        (TaskType::ShortTermPrice, [L, L, M, L, B, M, M]),
    ];

    #[test]
    fn the_whole_table_is_pinned() {
        assert_eq!(TABLE.len(), TaskType::ALL.len());
        for (i, (task, row)) in TABLE.iter().enumerate() {
            assert_eq!(*task, TaskType::ALL[i], "rows follow TaskType::ALL");
            for (j, source) in DataSource::ALL.iter().enumerate() {
                assert_eq!(
                    data_impact(*task, *source),
                    row[j],
                    "data_impact({task:?}, {source:?})"
                );
            }
        }
    }

    #[test]
    fn seed_examples_hold() {
        use DataSource::*;
        use TaskType::*;
        assert_eq!(data_impact(IntradayTrading, RealtimeQuote), B);
        assert_eq!(data_impact(LongTermFundamental, RealtimeQuote), M);
        assert_eq!(data_impact(EventDriven, News), H);
        assert_eq!(data_impact(TechnicalAnalysis, News), L);
        assert_eq!(data_impact(Valuation, Financials), B);
        assert_eq!(data_impact(ShortTermPrice, Financials), M);
    }

    #[test]
    fn deterministic() {
        for t in TaskType::ALL {
            for s in DataSource::ALL {
                assert_eq!(data_impact(t, s), data_impact(t, s));
            }
        }
    }
}
