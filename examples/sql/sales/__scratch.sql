-- Files and folders starting with "__" are left out of the DAG.
SELECT * FROM somewhere_else;
