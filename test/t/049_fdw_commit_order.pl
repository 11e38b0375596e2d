# A commit that rlock's check fails (40001) commits nothing elsewhere
# either: postgres_fdw commits its remote transactions in its own
# pre-commit callback, and PostgreSQL calls the callback registered last
# first.  rlock's check is kept ahead of it whichever came first in the
# session: the lock taken before the first remote write, or after it; in
# a fresh session, or one where both were used before in either order; in
# a procedure that commits.  A lock that stays held lets both commit.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;

plan skip_all => 'the order of commit callbacks does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

# A PostgreSQL built without contrib (the 16 row of test/matrix) has no
# postgres_fdw to order against
my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => "postgres_fdw is not installed in $sharedir"
  unless -f "$sharedir/extension/postgres_fdw.control";

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('fdw', $redis);
my $port = $node->port;
my $host = $node->host;
$node->safe_psql('postgres', 'CREATE DATABASE remote');
$node->safe_psql('remote', 'CREATE TABLE items (id int PRIMARY KEY, what text)');
$node->safe_psql('postgres', qq{
	CREATE EXTENSION postgres_fdw;
	CREATE SERVER remote FOREIGN DATA WRAPPER postgres_fdw
		OPTIONS (host '$host', port '$port', dbname 'remote');
	CREATE USER MAPPING FOR CURRENT_USER SERVER remote;
	CREATE FOREIGN TABLE items (id int, what text) SERVER remote;
	CREATE TABLE local_items (id int, what text);
});

sub remote_rows
{
	my ($id) = @_;
	return $node->safe_psql('remote', "SELECT count(*) FROM items WHERE id = $id");
}

# One transaction of a session that runs $before first (earlier
# transactions), then: @steps in a transaction, the lock deleted from
# Redis before COMMIT when $lose.  Returns the COMMIT's error output.
my $n = 0;
sub run_case
{
	my (%c) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe($_) for @{ $c{before} // [] };
	$s->query_safe('BEGIN');
	$s->query_safe($_) for @{ $c{steps} };
	$redis->cmd('DEL', $c{key}) if $c{lose};
	$s->{stderr} = '';
	$s->query("\\set VERBOSITY verbose\nCOMMIT");
	my $err = $s->{stderr};
	$s->quit;
	return $err;
}

my @orders = (
	[ 'rlock first, fresh session', [],
	  sub { ("SELECT rlock_try('$_[0]')", "INSERT INTO items VALUES ($_[1], 'x')") } ],
	[ 'fdw first, fresh session', [],
	  sub { ("INSERT INTO items VALUES ($_[1], 'x')", "SELECT rlock_try('$_[0]')") } ],
	[ 'rlock first, both used before (rlock, then fdw)',
	  [ "SELECT rlock_session_try('fdw:warm1'), rlock_session_release('fdw:warm1')", 'SELECT count(*) FROM items' ],
	  sub { ("SELECT rlock_try('$_[0]')", "INSERT INTO items VALUES ($_[1], 'x')") } ],
	[ 'fdw first, both used before (rlock, then fdw)',
	  [ "SELECT rlock_session_try('fdw:warm2'), rlock_session_release('fdw:warm2')", 'SELECT count(*) FROM items' ],
	  sub { ("INSERT INTO items VALUES ($_[1], 'x')", "SELECT rlock_try('$_[0]')") } ],
	[ 'rlock first, both used before (fdw, then rlock)',
	  [ 'SELECT count(*) FROM items', "SELECT rlock_session_try('fdw:warm3'), rlock_session_release('fdw:warm3')" ],
	  sub { ("SELECT rlock_try('$_[0]')", "INSERT INTO items VALUES ($_[1], 'x')") } ],
	[ 'a remote write from a trigger, after the lock',
	  [],
	  sub { ("SELECT rlock_try('$_[0]')", "INSERT INTO local_items VALUES ($_[1], 'x')") } ]);

$node->safe_psql('postgres', q{
	CREATE FUNCTION copy_remote() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO items VALUES (NEW.id, NEW.what);
		RETURN NEW;
	END $$;
	CREATE TRIGGER copy_remote AFTER INSERT ON local_items
		FOR EACH ROW EXECUTE FUNCTION copy_remote();
});

for my $o (@orders)
{
	my ($what, $before, $steps) = @$o;
	$n++;
	my $key = "fdw:lost$n";
	my $err = run_case(key => $key, lose => 1, before => $before,
		steps => [ $steps->($key, $n) ]);
	like($err, qr/ERROR:  40001: lock "\Q$key\E" was lost before the transaction committed/,
		"$what: the lost lock fails the commit");
	is(remote_rows($n), 0, "$what: the remote write did not commit");

	$n++;
	$key = "fdw:kept$n";
	$err = run_case(key => $key, before => $before,
		steps => [ $steps->($key, $n) ]);
	is($err, '', "$what: with the lock kept, the commit succeeds");
	is(remote_rows($n), 1, "$what: and the remote write committed");
	is($redis->cmd('EXISTS', $key), 0, "$what: and the lock was released");
}

# a procedure that commits: each COMMIT checks the locks taken since the
# last, before the remote write of that stretch commits
$node->safe_psql('postgres', q{
	CREATE PROCEDURE two_parts(k text, first int) LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM rlock_try(k || ':a');
		INSERT INTO items VALUES (first, 'a');
		COMMIT;
		PERFORM rlock_try(k || ':b');
		INSERT INTO items VALUES (first + 1, 'b');
		PERFORM pg_sleep(0.5);
		COMMIT;
	END $$;
});
my $s = $node->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($s, "\\set VERBOSITY verbose\nCALL two_parts('fdw:proc', 100);");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'fdw:proc:b') == 1 }, 10),
	'procedure: the second part holds its lock');
$redis->cmd('DEL', 'fdw:proc:b');
my (undef, $err) = RlockTest::collect($s);
like($err, qr/ERROR:  40001: lock "fdw:proc:b" was lost/,
	'procedure: the second COMMIT fails on the lost lock');
is(remote_rows(100), 1, 'procedure: the first part, whose lock held, committed remotely');
is(remote_rows(101), 0, 'procedure: the second part did not');
$s->quit;

# the same when the lock is taken by a PL/pgSQL expression (IF, an
# assignment), which runs without the executor, as the last thing before
# the procedure's COMMIT, and the foreign server is first used in the
# session by that procedure, after rlock was: no statement ends between
# the foreign server's first use and the COMMIT
$node->safe_psql('postgres', q{
	CREATE PROCEDURE lock_by_expression(k text, id int) LANGUAGE plpgsql AS $$
	DECLARE
		until timestamptz;
	BEGIN
		INSERT INTO items VALUES (id, 'e');
		IF NOT rlock_try(k) THEN
			RAISE EXCEPTION 'lock % busy', k;
		END IF;
		until := clock_timestamp() + interval '1 s';
		WHILE clock_timestamp() < until LOOP
		END LOOP;
		COMMIT;
	END $$;
});
$s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe("\\set VERBOSITY verbose\nSELECT rlock_session_try('fdw:warm4'), rlock_session_release('fdw:warm4')");
RlockTest::send_query($s, "CALL lock_by_expression('fdw:expr', 200);");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'fdw:expr') == 1 }, 10),
	'lock taken by an expression: held');
$redis->cmd('DEL', 'fdw:expr');
(undef, $err) = RlockTest::collect($s);
like($err, qr/ERROR:  40001: lock "fdw:expr" was lost/,
	'lock taken by an expression: the COMMIT fails on the lost lock');
is(remote_rows(200), 0, 'lock taken by an expression: the remote write did not commit');
$s->quit;

$node->stop;
$redis->stop;
done_testing();
