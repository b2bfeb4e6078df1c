#!/usr/bin/python3
"""Checks of the per-prompt head detectors' reference (tools/train/head_scores.py) and of the
fixture made from it: /usr/bin/python3 -m unittest discover -s tools/reference -v
"""

import os
import subprocess
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "train"))
import head_scores  # noqa: E402


def random_pattern(L, H, T, seed=0):
    """Causal attention patterns [layer, head, query, key], rows summing to 1."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(L, H, T, T, generator=g, dtype=torch.float64)
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1)


class MasksTest(unittest.TestCase):
    def test_hand_checked_masks(self):
        # BOS a b a a b (the C++ test's detector_plan case)
        m = head_scores.detection_masks([9, 1, 2, 1, 1, 2], bos_prepended=True)
        ones = lambda mask: sorted(map(tuple, mask.nonzero().tolist()))  # noqa: E731
        self.assertEqual(ones(m["previous_token"]), [(2, 1), (3, 2), (4, 3), (5, 4)])
        self.assertEqual(ones(m["duplicate_token"]), [(3, 1), (4, 1), (4, 3), (5, 2)])
        self.assertEqual(ones(m["induction"]), [(3, 2), (4, 2), (5, 3)])
        self.assertEqual(ones(head_scores.detection_masks([9, 5, 9], False)["duplicate_token"]), [(2, 0)])
        self.assertEqual(ones(head_scores.detection_masks([9, 5, 9], True)["duplicate_token"]), [])

    def test_repeated_random_tokens_reduce_to_the_fixed_sequence_scores(self):
        n, bos = 7, 99
        r = [3, 14, 15, 92, 65, 35, 8]
        tokens = [bos] + r + r
        pats = random_pattern(2, 3, len(tokens))
        res = head_scores.prompt_scores(pats, tokens, True)
        q = torch.arange(n + 1, 2 * n + 1)
        for name, offset in (("duplicate_token", n), ("induction", n - 1)):
            self.assertEqual(res[name]["query_positions"], n)
            expected = pats[:, :, q, q - offset].mean(dim=-1)
            torch.testing.assert_close(torch.tensor(res[name]["scores"], dtype=torch.float64), expected)
        q = torch.arange(2, len(tokens))
        torch.testing.assert_close(torch.tensor(res["previous_token"]["scores"], dtype=torch.float64),
                                   pats[:, :, q, q - 1].mean(dim=-1))

    def test_no_repeats_is_no_score(self):
        res = head_scores.prompt_scores(random_pattern(1, 2, 4), [9, 1, 2, 3], True)
        self.assertEqual(res["duplicate_token"], {"scores": [[None, None]], "query_positions": 0})
        self.assertEqual(res["induction"]["query_positions"], 0)
        self.assertEqual(res["previous_token"]["query_positions"], 2)


class FixtureUpToDateTest(unittest.TestCase):
    def test_committed_fixture_is_what_the_script_writes(self):
        script = os.path.join(REPO, "tests", "fixtures", "analyses", "make_head_detectors.py")
        done = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)


if __name__ == "__main__":
    unittest.main()
