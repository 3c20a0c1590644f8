"""A request-to-token table whose requests own scattered whole KV pages, for the DSA CPU tests of every line."""

from __future__ import annotations


def scattered_req_to_token(torch, num_reqs: int, max_context: int, page: int, seed: int):
    """[num_reqs + 1, max_context + 8] int32; row r + 1 holds request r's token slots (page * page_size + offset),
    its pages a random permutation of the pool's (page 0 and row 0 stay unused, as in sglang's pools)."""
    gen = torch.Generator().manual_seed(seed)
    pages_per_req = max_context // page
    perm = torch.randperm(num_reqs * pages_per_req, generator=gen) + 1
    req_to_token = torch.zeros((num_reqs + 1, max_context + 8), dtype=torch.int32)
    for r in range(num_reqs):
        pages = perm[r * pages_per_req : (r + 1) * pages_per_req]
        slots = (pages[:, None] * page + torch.arange(page)[None, :]).reshape(-1)
        req_to_token[r + 1, :max_context] = slots.to(torch.int32)
    return req_to_token
