from datetime import datetime, timezone

def test_happy(dagbag):
    dag = dagbag.get_dag("tpc_it_local")
    dr = dag.test(logical_date=datetime(2026, 3, 2, tzinfo=timezone.utc))
    print(dr.state, dr.data_interval_start)
    for ti in dr.get_task_instances():
        print(ti.task_id, ti.state, ti.try_number)
    assert dr.state == "success"
