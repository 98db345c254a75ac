import pytest

pytestmark = pytest.mark.service


async def test_create_append_read(service, http, topic_name):
    async with http.put(f"{service.url}/v0/topics/{topic_name}", json={}) as r:
        assert r.status == 201
    async with http.post(
        f"{service.url}/v0/topics/{topic_name}/records", json={"records": [{"data": {"x": 1}}]}
    ) as r:
        assert r.status == 200
        assert (await r.json())["first_seq"] == 1
    async with http.get(f"{service.url}/v0/topics/{topic_name}/records") as r:
        body = await r.json()
    assert [rec["$seq"] for rec in body["records"]] == [1]
