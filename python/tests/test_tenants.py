"""Tenants: one namespace each; with [auth] on, a client token is held to its tenant."""

import pytest

import crescent


def test_tenants_do_not_see_each_others_keys(server, prefix):
    a = crescent.Store(server, tenant="team-a")
    b = crescent.Store(server, tenant="team-b")
    a.put(prefix + "k", b"a's")
    b.put(prefix + "k", b"b's")
    assert a.get(prefix + "k") == b"a's"
    assert b.get(prefix + "k") == b"b's"
    assert a.tenant == "team-a"
    default = crescent.Store(server)
    assert not default.exists(prefix + "k")
    scoped = default.scoped("team-a")
    assert scoped.get(prefix + "k") == b"a's"
    assert [k for k, _, _ in b.list(prefix)] == [prefix + "k"]


def test_a_bad_tenant_name_is_invalid(server):
    with pytest.raises(crescent.InvalidArgumentError):
        crescent.Store(server, tenant="has space")


def test_a_client_token_is_held_to_its_tenant(auth_server, prefix):
    addr, issue = auth_server
    with pytest.raises(crescent.AuthError) as e:
        crescent.Store(addr).put(prefix + "k", b"v")
    assert e.value.code == "UNAUTHENTICATED"
    token = issue("client", tenant="alpha")
    alpha = crescent.Store(addr, token=token)
    assert alpha.tenant == "alpha"  # the token's tenant is the default scope
    alpha.put(prefix + "k", b"alpha's")
    assert alpha.get(prefix + "k") == b"alpha's"
    with pytest.raises(crescent.AuthError) as e:
        crescent.Store(addr, token=token, tenant="beta").get(prefix + "k")
    assert e.value.code == "PERMISSION_DENIED"


def test_a_segment_under_auth_mounts_with_an_owner_token(auth_server, prefix):
    addr, issue = auth_server
    client_token = issue("client", tenant="alpha")
    with pytest.raises(crescent.AuthError):
        crescent.Store(addr, token=client_token, segment_size=16 << 20)
    owner_token = issue("owner", owner="py-owner")
    with crescent.Store(addr, token=client_token, segment_size=16 << 20,
                        owner_token=owner_token, owner_id="py-owner") as s:
        assert s.segment and s.segment.startswith("py-owner/")
        s.put(prefix + "k", b"on my own segment")
        assert s.get(prefix + "k") == b"on my own segment"


def test_a_tenants_quota_refuses_puts_past_it_and_shows_usage(server, prefix):
    import json
    import subprocess
    import uuid

    from conftest import binary

    tenant = "quota-" + uuid.uuid4().hex[:8]
    cli = [str(binary("crescent")), "--server", server, "--tenant", tenant]
    subprocess.run([*cli, "tenant", "quota", "set", "--max-bytes", "1000"],
                   check=True, capture_output=True)
    s = crescent.Store(server, tenant=tenant)
    s.put(prefix + "a", b"x" * 600)
    with pytest.raises(crescent.CapacityError) as e:
        s.put(prefix + "b", b"x" * 600)
    assert e.value.code == "QUOTA_EXCEEDED"
    assert not s.exists(prefix + "b")
    shown = subprocess.run([*cli, "--json", "tenant", "show"], check=True, capture_output=True)
    usage = json.loads(shown.stdout)
    assert (usage["used_bytes"], usage["used_objects"], usage["max_bytes"]) == (600, 1, 1000)
