-- One row per run: what the pipeline saw (runs after 01_daily, in file-name order).
CREATE TABLE IF NOT EXISTS revenue_runs (run_id TEXT, days INTEGER, total REAL,
                                         full_refresh INTEGER);
INSERT INTO revenue_runs (run_id, days, total, full_refresh)
SELECT '{{ run_id }}', COUNT(*), SUM(total), {{ 1 if full_refresh else 0 }} FROM daily_revenue;
