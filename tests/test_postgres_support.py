import psycopg
import pytest


@pytest.mark.postgres
def test_private_server_gives_each_test_its_own_database(postgres_server, pg_url):
    other = postgres_server.create_database()
    assert other != pg_url
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        conn.execute("create table t (x int)")
    with psycopg.connect(other.replace("postgresql+psycopg://", "postgresql://")) as conn:
        assert conn.execute("select count(*) from pg_tables where tablename = 't'").fetchone() == (0,)
