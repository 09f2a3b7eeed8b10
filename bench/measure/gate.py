"""The correctness gate: one round trip whose every received byte and combined value is checked.

One point (backend x shape x tokens per rank) is gated on every rank before it is timed:
every row a rank receives must be bit-exact (values, scales, expert ids, weights) for the
token index it claims; every token must reach every rank owning one of its experts, once;
combine must return exactly ``sum_k w_k · c_{e_k} · x`` (the synthetic experts make that
exact in bf16, see ``bench/synthetic.py``). The first mismatch on the lowest rank is the
error text; a failed gate means status ``incorrect`` and no timing.
"""

from __future__ import annotations

from bench.measure.agreement import agree


def first_true(mask):
    """Index tuple of the first True element of a bool tensor (row-major), or None."""
    idx = mask.nonzero()
    return None if idx.shape[0] == 0 else tuple(int(v) for v in idx[0])


def check_dispatch(point, rank: int, received) -> str | None:
    """The first way ``received`` differs from what ``rank`` must get, or None.

    Every valid row must carry, bit-exact, the payload of the token it names; every token
    routed to an expert of ``rank`` must arrive; no token may arrive twice.
    """
    import torch

    w = point
    dev = received.x.device
    valid = received.valid
    idx = received.token_index.to(torch.int64).reshape(-1)
    if valid is not None:
        idx = idx[valid.to(dev)]
    n_total = w.total_tokens
    bad = (idx < 0) | (idx >= n_total)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        return f"rank {rank}: received row {i} names token {int(idx[i])}, outside [0, {n_total})"

    def rows(t):
        return t if (t is None or valid is None) else t[valid.to(dev)]

    if received.expert is not None:
        problem = check_slots(w, rank, idx, rows(received.expert).to(torch.int64).reshape(-1))
    else:
        problem = check_delivery(w, rank, idx)
    if problem:
        return problem
    exp_x, exp_sf = w.payload_rows(idx)
    ids, a = w.global_routing(dev)
    checks = [("activation byte", rows(received.x), exp_x)]
    if w.scale_bytes:
        checks.append(("scale byte", rows(received.x_sf), exp_sf))
    # Picks owned by other ranks may come back as an invalid id (outside [0, experts)) with
    # any weight (FlashInfer and DeepEP mark them so); this rank's own picks must be exact.
    # Per-slot layouts may return no routing at all (combine gets it from the caller).
    exp_ids = ids[idx]
    local = w.expert_owner(exp_ids) == rank
    slots = received.expert is not None
    if not (slots and received.topk_ids is None):
        got_ids = rows(received.topk_ids)
        got_ids = None if got_ids is None else got_ids.to(torch.int64)
        checks.append(("expert id", got_ids, exp_ids.to(torch.int64)))
    if not (slots and received.topk_weights is None):
        got_w = rows(received.topk_weights)
        checks.append(("routing weight", None if got_w is None else got_w.to(torch.float32),
                       a[idx].to(torch.float32) / 16.0))
    for what, got, expected in checks:
        if got is None or tuple(got.shape) != tuple(expected.shape):
            shape = None if got is None else list(got.shape)
            return f"rank {rank}: {what}s have shape {shape}, expected {list(expected.shape)}"
        wrong = got != expected
        if what == "expert id":
            wrong &= local | ((got >= 0) & (got < w.experts))
        elif what == "routing weight":
            wrong &= local
        pos = first_true(wrong)
        if pos is not None:
            r, c = pos
            g = int(idx[r])
            gv, ev = got[r, c].item(), expected[r, c].item()
            if what.endswith("byte"):
                gv, ev = f"0x{int(gv):02x}", f"0x{int(ev):02x}"
            return (f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) {what} {c}: "
                    f"got {gv}, expected {ev}")
    return None


def check_delivery(w, rank: int, idx) -> str | None:
    """Per-token layouts: every token routed to an expert of ``rank`` arrived, and none twice."""
    import torch

    dev = idx.device
    srt = idx.sort().values
    dup = srt[1:] == srt[:-1]
    if bool(dup.any()):
        g = int(srt[int(dup.nonzero()[0]) + 1])
        return f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) arrived twice"
    need = w.destinations(dev)[:, rank]
    present = torch.zeros(w.total_tokens, dtype=torch.bool, device=dev)
    present[idx] = True
    missing = need & ~present
    if bool(missing.any()):
        g = int(missing.nonzero()[0])
        ids, _ = w.global_routing(dev)
        first, last = w.expert_range(rank)
        mine = [e for e in ids[g].tolist() if first <= e < last]
        return (f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) never arrived, "
                f"though rank {rank} owns its expert{'s' if len(mine) > 1 else ''} {', '.join(map(str, mine))}")
    return None


def check_slots(w, rank: int, idx, expert) -> str | None:
    """Per-slot layouts: every (token, local expert) pair routed here exactly once, nothing else."""
    import torch

    ids, _ = w.global_routing(idx.device)
    first, last = w.expert_range(rank)
    e_count = w.experts
    got = idx * e_count + expert
    srt = got.sort().values
    dup = srt[1:] == srt[:-1]
    if bool(dup.any()):
        k = int(srt[int(dup.nonzero()[0]) + 1])
        return f"rank {rank}: token {k // e_count} arrived twice for expert {k % e_count}"
    tokens = torch.arange(ids.shape[0], device=idx.device)[:, None].expand_as(ids).to(torch.int64)
    mine = (ids >= first) & (ids < last)
    need = (tokens[mine] * e_count + ids[mine].to(torch.int64)).sort().values
    extra = ~torch.isin(srt, need)
    if bool(extra.any()):
        k = int(srt[int(extra.nonzero()[0])])
        return f"rank {rank}: token {k // e_count} arrived for expert {k % e_count}, which it is not routed to here"
    missing = ~torch.isin(need, srt)
    if bool(missing.any()):
        k = int(need[int(missing.nonzero()[0])])
        g = k // e_count
        return (f"rank {rank}: token {g} (from rank {g // w.tokens_per_rank}) never arrived "
                f"for expert {k % e_count}")
    return None


def check_combine(point, rank: int, out) -> str | None:
    """The first element where ``out`` differs from the exact ``sum_k w_k · expert_k(token)``, or None."""
    import torch

    expected = point.expected_combine(rank, out.device)
    if tuple(out.shape) != tuple(expected.shape):
        return f"rank {rank}: combine returned shape {list(out.shape)}, expected {list(expected.shape)}"
    got = out.to(torch.bfloat16)
    pos = first_true(got.view(torch.int16) != expected.view(torch.int16))
    if pos is None:
        return None
    t, h = pos
    g = rank * point.tokens_per_rank + t
    gv, ev = float(got[t, h]), float(expected[t, h])
    ratio = f" ({gv / ev:.4g}x)" if ev else ""
    return (f"rank {rank}: combine of token {g} element {h}: got {gv:g}, expected {ev:g}{ratio} "
            f"= sum_k w_k * expert_k(token)")


def gate_round_trip(adapter, ctx, point, batch):
    """One checked round trip (collective): ``(problem, received, expert_out)``, problem None when exact."""
    received = adapter.dispatch(batch)
    problem = agree(ctx, check_dispatch(point, ctx.rank, received))
    if problem:
        return "dispatch: " + problem, received, None
    expert_out = point.expert_output(ctx.rank, received.x, received.topk_ids,
                                        received.topk_weights, received.valid, received.expert)
    out = adapter.combine(expert_out)
    problem = agree(ctx, check_combine(point, ctx.rank, out))
    if problem:
        return "combine: " + problem, received, expert_out
    return None, received, expert_out

