"""Writes leakage_templated_d.jsonl: two templated problem families for leakage set D.

Every problem in a family shares all of its words but a key (a ticket number or a vault code) and the
numbers the template varies, so only those tell one problem from another.
"""

import json
from pathlib import Path

SEAT_KEYS = (17, 5, 23, 9, 31, 12, 40, 3, 26, 14, 8, 35, 19, 2, 28, 11, 44, 6, 21, 37)
VAULT_CODES = ("QX-31", "LM-08", "RT-52", "KV-19", "ZB-77", "HN-26", "PD-40", "WC-63", "JF-15", "SY-94")
VAULT_MODULI = ((7, 11), (9, 13), (8, 15), (11, 17), (13, 19), (12, 17), (16, 21), (19, 23), (14, 25), (17, 20))

OUT = Path(__file__).with_name("leakage_templated_d.jsonl")


def seat_rows() -> list[dict[str, str]]:
    rows = []
    for index, key in enumerate(SEAT_KEYS[:10]):
        first = 10 + (index * 7) % 15
        step = 1 + index % 4
        problem = (
            f"Ticket T-{key}: In the Larkspur Theatre, row 1 has {first} seats and every row after it has "
            f"{step} more seats than the row in front of it. How many seats does row {key} have?"
        )
        rows.append({"id": f"seats-{index + 1:02d}", "problem": problem, "answer": str(first + (key - 1) * step)})
    return rows


def vault_rows() -> list[dict[str, str]]:
    rows = []
    for index, (code, (m1, m2)) in enumerate(zip(VAULT_CODES, VAULT_MODULI, strict=True)):
        r1 = (3 * index + 2) % m1
        r2 = (5 * index + 4) % m2
        answer = next(x for x in range(1, m1 * m2 + 1) if x % m1 == r1 and x % m2 == r2)
        problem = (
            f"Vault {code}: The combination of vault {code} is the smallest positive integer that leaves "
            f"remainder {r1} when divided by {m1} and remainder {r2} when divided by {m2}. "
            f"What is the combination of vault {code}?"
        )
        rows.append({"id": f"vault-{index + 1:02d}", "problem": problem, "answer": str(answer)})
    return rows


def main() -> None:
    rows = seat_rows() + vault_rows()
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
