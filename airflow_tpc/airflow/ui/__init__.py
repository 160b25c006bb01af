"""HTML and static files of the airflow-tpc UI plugin pages."""
