-- Keep a clean copy of the connector's orders. After a Fivetran re-sync the source
-- was rewritten from scratch, so rebuild instead of upserting.
{% if full_refresh %}
DROP TABLE IF EXISTS orders_clean;
{% endif %}
CREATE TABLE IF NOT EXISTS orders_clean (id INTEGER PRIMARY KEY, day TEXT, amount REAL);
INSERT OR REPLACE INTO orders_clean (id, day, amount)
SELECT id, day, amount FROM fivetran_demo.orders WHERE amount IS NOT NULL;
-- Which loads were full refreshes (the end-to-end test reads this).
CREATE TABLE IF NOT EXISTS orders_clean_loads (run_id TEXT, full_refresh INTEGER);
INSERT INTO orders_clean_loads (run_id, full_refresh)
VALUES ('{{ run_id }}', {{ 1 if full_refresh else 0 }});
