#!/usr/bin/env python3
"""Retry a locked read-modify-write transaction, with psycopg2.

A transaction guarded by rlock can fail for reasons that a new attempt
cures:

  40001  the lock was lost before the commit (its lease ran out, it was
         removed from Redis, Redis restarted); the commit was refused and
         nothing of the transaction is visible;
  58030  Redis could not be reached in time: the lock could not be taken,
         or the check before commit could not be made;
  55P03  lock_timeout ran out while rlock_lock() waited.

Each of them rolls the whole transaction back, so the attempt is simply
made again from the start, after a short, growing, jittered pause.  Any
other error is the application's and goes up at once.

Usage: retry_loop.py CONNINFO KEY ACCOUNT AMOUNT
prints the attempts it took and the new balance.
"""

import random
import sys
import time

import psycopg2
import psycopg2.errorcodes

RETRYABLE = {
    psycopg2.errorcodes.SERIALIZATION_FAILURE,   # 40001
    psycopg2.errorcodes.IO_ERROR,                # 58030
    psycopg2.errorcodes.LOCK_NOT_AVAILABLE,      # 55P03
}


def add_to_balance(conn, key, account, amount):
    """One attempt: lock, read, write, commit.  Returns the new balance."""
    with conn.cursor() as cur:
        cur.execute("SET LOCAL lock_timeout = '5s'")
        cur.execute("SELECT rlock_lock(%s)", (key,))
        cur.execute("SELECT balance FROM accounts WHERE id = %s", (account,))
        balance = cur.fetchone()[0] + amount
        cur.execute("UPDATE accounts SET balance = %s WHERE id = %s",
                    (balance, account))
    conn.commit()        # the check before commit runs here: 40001 if lost
    return balance


def with_retries(conn, attempt, *args, tries=5, pause=0.05):
    for n in range(1, tries + 1):
        try:
            return n, attempt(conn, *args)
        except psycopg2.Error as e:
            conn.rollback()
            if e.pgcode not in RETRYABLE or n == tries:
                raise
            print(f"attempt {n} failed with {e.pgcode}; trying again",
                  file=sys.stderr)
            time.sleep(pause * 2 ** (n - 1) * random.uniform(0.5, 1.5))


def main():
    conninfo, key, account, amount = sys.argv[1:5]
    conn = psycopg2.connect(conninfo)
    attempts, balance = with_retries(conn, add_to_balance, key,
                                     int(account), int(amount))
    print(f"attempts={attempts} balance={balance}")
    conn.close()


if __name__ == "__main__":
    main()
