# What doc/operations.md gives operators works as written: the
# postgres_exporter queries file runs and yields every metric it declares;
# the Python retry loop (doc/examples/retry_loop.py) survives a commit
# refused with 40001 and a statement that fails with 55P03 by trying again;
# the SQL procedure's loop (doc/examples/retry_loop.sql) retries a wait
# that ran out.

use strict;
use warnings;

use IPC::Run qw(start finish);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

my $top = $ENV{TESTDIR} // '.';
my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('ops', $redis);

#---- the postgres_exporter queries file ----

# The file's shape (postgres_exporter's queries file): a name at column
# 0, its query as a "|" block, its metrics as "- name:" items.
my (%query, %metrics, $name, $in_query);
open(my $fh, '<', "$top/doc/examples/postgres_exporter.yml") or die $!;
while (<$fh>)
{
	next if /^\s*#/;
	if (/^(\w+):\s*$/) { $name = $1; $in_query = 0; next }
	if (/^  query: \|\s*$/) { $in_query = 1; next }
	if (/^  metrics:/) { $in_query = 0; next }
	if ($in_query && /^    (.*)$/) { $query{$name} .= "$1\n"; next }
	push @{ $metrics{$name} }, $1 if /^    - (\w+):\s*$/;
}
close($fh);
is_deeply([ sort keys %query ], [qw(rlock_locks rlock_stats rlock_status)],
	'the exporter file has queries for the three views');

my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT rlock_session_try('ops:held')");
for my $q (sort keys %query)
{
	my ($rc, $out, $err) = $node->psql('postgres', $query{$q},
		extra_params => [ '-P', 'tuples_only=off', '-P', 'footer=off' ]);
	is($rc, 0, "$q: the query runs") or diag($err);
	my ($header, @rows) = split /\n/, $out;
	my %col = map { $_ => 1 } split /\|/, ($header // '');
	my @missing = grep { !$col{$_} } @{ $metrics{$q} };
	is("@missing", '', "$q: every declared metric is a column");
	cmp_ok(scalar @rows, '>=', 1, "$q: and it returns rows");
}
my $held = $node->safe_psql('postgres',
	"WITH m AS ($query{rlock_locks}) SELECT entries FROM m WHERE state = 'held'");
is($held, '1', 'the held lock is counted');
is( $node->safe_psql('postgres',
		"WITH m AS ($query{rlock_status}) SELECT worker_up, command_ready FROM m"),
	'1|1', 'worker and connection are up');
$holder->query_safe("SELECT rlock_session_release('ops:held')");

#---- the Python retry loop ----

$node->safe_psql('postgres',
	'CREATE TABLE accounts (id int PRIMARY KEY, balance int);'
	  . 'INSERT INTO accounts VALUES (1, 100)');
my $conninfo = $node->connstr('postgres');

# A row lock keeps the first attempt between its rlock_lock and its
# UPDATE; meanwhile its lock is deleted from Redis, so its commit is
# refused with 40001.  The second attempt goes through.
my $row = $node->background_psql('postgres');
$row->query_safe('BEGIN');
$row->query_safe('SELECT * FROM accounts WHERE id = 1 FOR UPDATE');
my ($out, $err) = ('', '');
my $py = start([ '/usr/bin/python3', "$top/doc/examples/retry_loop.py",
		$conninfo, 'ops:acct', '1', '10' ],
	'>', \$out, '2>', \$err);
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity a JOIN rlock_locks l USING (pid)"
				  . " WHERE l.key = 'ops:acct' AND l.state = 'held'"
				  . " AND a.wait_event_type = 'Lock'") eq '1';
		}),
	'the first attempt holds the lock and waits for the row');
$redis->cmd('DEL', 'ops:acct');
$row->query_safe('COMMIT');
finish($py);
is($?, 0, 'the retry loop ends well') or diag($err);
like($err, qr/attempt 1 failed with 40001; trying again/,
	'its first commit was refused with 40001');
like($out, qr/^attempts=2 balance=110$/m, 'the second attempt committed once');
is($node->safe_psql('postgres', 'SELECT balance FROM accounts WHERE id = 1'),
	'110', 'the balance moved once');

# A lock held elsewhere beyond lock_timeout: 55P03, and again
my $other = $node->background_psql('postgres');
$other->query_safe("SELECT rlock_session_try('ops:acct')");
($out, $err) = ('', '');
$py = start([ '/usr/bin/python3', "$top/doc/examples/retry_loop.py",
		$conninfo, 'ops:acct', '1', '5' ],
	'>', \$out, '2>', \$err);
ok(RlockTest::wait_until(sub { $py->pump_nb; $err =~ /attempt 1 failed with 55P03/ }, 15),
	'a wait that ran out (55P03) is tried again');
$other->query_safe("SELECT rlock_session_release('ops:acct')");
finish($py);
like($out, qr/balance=115$/m, 'and commits once the lock is free');

#---- the SQL procedure's loop ----

my $sql = slurp_file("$top/doc/examples/retry_loop.sql");
$node->safe_psql('postgres', $sql);
$other->query_safe("SELECT rlock_session_try('ops:acct')");
my $before = $node->safe_psql('postgres', 'SELECT timed_out FROM rlock_stats');
my $caller = $node->background_psql('postgres', on_error_stop => 0);
$caller->query_until(qr/calling/,
	"\\echo calling\nCALL add_to_balance_with_retries('ops:acct', 1, 1);\n");
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres', 'SELECT timed_out FROM rlock_stats') > $before;
		}),
	'the procedure\'s first wait ran out');
$other->query_safe("SELECT rlock_session_release('ops:acct')");
$caller->query("SELECT 'done'");
is($caller->{stderr} =~ /ERROR/ ? $caller->{stderr} : '', '',
	'the procedure tried again and committed');
is($node->safe_psql('postgres', 'SELECT balance FROM accounts WHERE id = 1'),
	'116', 'the balance moved once more');
$caller->quit;
$other->quit;
$row->quit;
$holder->quit;

done_testing();
