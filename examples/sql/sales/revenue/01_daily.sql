-- Revenue per day, from the clean orders (runs after orders_clean: it reads its table).
CREATE TABLE IF NOT EXISTS daily_revenue (day TEXT PRIMARY KEY, total REAL, orders INTEGER);
INSERT OR REPLACE INTO daily_revenue (day, total, orders)
SELECT day, SUM(amount), COUNT(*) FROM orders_clean GROUP BY day;
