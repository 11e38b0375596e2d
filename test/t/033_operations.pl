# What doc/operations.md gives operators works as written: the install
# blocks, run as they stand in the page, let the application's role lock;
# the sql_exporter collector file runs and yields every metric it
# declares, and the alerts use its metrics; the Python retry loop
# (doc/examples/retry_loop.py) survives a commit refused with 40001 and a
# statement that fails with 55P03 by trying again; the SQL procedure's
# loop (doc/examples/retry_loop.sql) retries a wait that ran out; the
# steps of "When locks hang" find and end a holder and read a Redis
# outage, with the outputs the page shows.

use strict;
use warnings;

use CPAN::Meta::YAML;
use IPC::Run qw(start finish);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'the operations page does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $top = $ENV{TESTDIR} // '.';
my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('ops', $redis);
my $page = slurp_file("$top/doc/operations.md");

# The text of the page's section "## $heading".
sub section
{
	my ($heading) = @_;
	$page =~ /^## \Q$heading\E\n(.*?)(?=^## |\z)/ms
	  or die "no section \"$heading\" in doc/operations.md";
	return $1;
}

# The fenced blocks of a text, in order, as [language, body], the body
# without the indentation of its fence (blocks inside list items).
sub blocks
{
	my ($text) = @_;
	my @found;
	while ($text =~ /^( *)```(\w*)\n(.*?)^\1```$/msg)
	{
		my ($indent, $lang, $body) = ($1, $2, $3);
		$body =~ s/^$indent//mg;
		push @found, [ $lang, $body ];
	}
	return @found;
}

#---- the install blocks ----

# the blocks as written, the first once, the second in two databases;
# "app" is the role the application logs in as, which the page assumes
my @install = grep { $_->[0] eq 'sql' } blocks(section('Install on a packaged Debian or Ubuntu server'));
is(scalar @install, 2, 'the install section has its two SQL blocks');
$node->safe_psql('postgres', 'CREATE ROLE app LOGIN; CREATE ROLE other LOGIN');
for my $db ('shop', 'billing')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
}
my ($rc, $out, $err) = $node->psql('postgres', $install[0][1], on_error_stop => 1);
is($rc, 0, 'the first block runs on a fresh install') or diag($err);
for my $db ('shop', 'billing')
{
	($rc, $out, $err) = $node->psql($db, $install[1][1], on_error_stop => 1);
	is($rc, 0, "the second block runs in database $db") or diag($err);
}
# every function that takes a lock (those PUBLIC may not run, but for the
# three kept for superusers and their grantees) is granted by the block
my $not_public = q{
	SELECT string_agg(p.oid::regprocedure::text, ' ' ORDER BY p.proname)
	FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'rlock'
	WHERE NOT has_function_privilege('other', p.oid, 'EXECUTE')
	  AND p.proname NOT IN ('rlock_force_release', 'rlock_holder', 'rlock_stats_reset')};
my $lockers = $node->safe_psql('shop', $not_public);
is(scalar(() = $lockers =~ /\(/g), 27,
	"twenty-seven functions take locks or permits or change a latch: $lockers");
is($node->safe_psql('shop', "$not_public AND NOT has_function_privilege('app', p.oid, 'EXECUTE')"),
	'', 'app may run every one of them');
for my $db ('shop', 'billing')
{
	my @calls = map { "SELECT $_" } (
		"rlock_try('$db:a')", "rlock_lock('$db:b')", "rlock_try_token('$db:c') > 0",
		"rlock_session_try('$db:d')", "rlock_session_lock('$db:e')",
		"rlock_session_try_token('$db:f') > 0",
		"rlock_try_shared('$db:g')", "rlock_lock_shared('$db:h')",
		"rlock_session_try_shared('$db:i')", "rlock_session_lock_shared('$db:j')",
		"rlock_try_fair('$db:k')", "rlock_lock_fair('$db:l')",
		"rlock_session_try_fair('$db:m')", "rlock_session_lock_fair('$db:n')",
		"rlock_try_set('{$db:o,$db:p}')", "rlock_lock_set('{$db:q}')",
		"rlock_session_try_set('{$db:r}')", "rlock_session_lock_set('{$db:s}')",
		"rlock_set_permits('$db:t', 10)", "rlock_add_permits('$db:t', 1)",
		"rlock_try_permits('$db:t')", "rlock_acquire_permits('$db:t')",
		"rlock_session_try_permits('$db:t')", "rlock_session_acquire_permits('$db:t')",
		"rlock_latch_set('$db:u', 2)", "rlock_latch_count_down('$db:u')",
		"rlock_latch_delete('$db:u')");
	($rc, $out, $err) = $node->psql($db,
		"BEGIN;\n" . join(";\n", @calls) . ";\nSELECT rlock_release_all();\nCOMMIT;",
		extra_params => [ '-U', 'app' ], on_error_stop => 1);
	is($rc, 0, "in $db, app takes a lock with each function") or diag($err);
	is($out, "t\n\nt\nt\n\nt\nt\n\nt\n\nt\n\nt\n\nt\n\nt\n\nt\n11\nt\n\nt\n\nt\n1\nt\n11",
		"in $db, each call took its lock or permit");
}
($rc, $out, $err) = $node->psql('shop', "SELECT rlock_try('inst:a')",
	extra_params => [ '-U', 'other' ]);
like($err, qr/permission denied for function rlock_try/, 'a role without the group may not');
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('shop',
				'SELECT command_connection, subscriber_connection FROM rlock_status()')
			  eq 'ready|ready';
		}),
	'rlock_status() shows both connections ready');

#---- the sql_exporter collector file ----

my $collector = CPAN::Meta::YAML->read(
	"$top/doc/examples/rlock.collector.yml")->[0];
is($collector->{collector_name}, 'rlock', 'the collector is named rlock');
my %query = map { $_->{query_name} => $_->{query} } @{ $collector->{queries} };
is_deeply([ sort keys %query ], [qw(rlock_locks rlock_stats rlock_status)],
	'the collector has queries for the three views');
my (%metrics, %seen);
for my $m (@{ $collector->{metrics} })
{
	my $name = $m->{metric_name};
	ok(!$seen{$name}++ && $m->{type} =~ /^(counter|gauge)$/ && $m->{help} ne ''
		  && @{ $m->{values} } == 1 && exists $query{ $m->{query_ref} },
		"metric $name: a name of its own, a type, help, one value, a query");
	push @{ $metrics{ $m->{query_ref} } }, @{ $m->{values} },
	  @{ $m->{key_labels} // [] };
}

my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT rlock_session_try('ops:held')");
for my $q (sort keys %query)
{
	($rc, $out, $err) = $node->psql('postgres', $query{$q},
		extra_params => [ '-P', 'tuples_only=off', '-P', 'footer=off' ]);
	is($rc, 0, "$q: the query runs") or diag($err);
	my ($header, @rows) = split /\n/, $out;
	my %col = map { $_ => 1 } split /\|/, ($header // '');
	my @missing = grep { !$col{$_} } @{ $metrics{$q} };
	is("@missing", '', "$q: every column its metrics use is there");
	cmp_ok(scalar @rows, '>=', 1, "$q: and it returns rows");
}
my $held = $node->safe_psql('postgres',
	"WITH m AS ($query{rlock_locks}) SELECT entries FROM m WHERE state = 'held'");
is($held, '1', 'the held lock is counted');
is( $node->safe_psql('postgres',
		"WITH m AS ($query{rlock_status}) SELECT worker_up, command_ready FROM m"),
	'1|1', 'worker and connection are up');
$holder->query_safe("SELECT rlock_session_release('ops:held')");

# the alerts of the page use metrics the file defines
my @used;
for my $row (section('What to monitor') =~ /^\|(.*)\|$/mg)
{
	my (undef, $expr) = split /\|/, $row;
	push @used, $expr =~ /\b(rlock_[a-z_]+)/g if $expr =~ /`/;
}
cmp_ok(scalar @used, '>=', 8, 'the alerts name metrics: ' . join(' ', @used));
is(join(' ', grep { !$seen{$_} } @used), '', 'each of them defined in the file');

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
($out, $err) = ('', '');
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


#---- "When locks hang", step by step ----

# A psql result in the page's form: the column names and the rows' cells.
sub table
{
	my ($text) = @_;
	my ($header, undef, @rows) = grep { !/^\(\d+ rows?\)$/ && $_ ne '' } split /\n/, $text;
	my $cells = sub { [ map { s/^\s+|\s+$//gr } split /\|/, $_[0], -1 ] };
	return ($cells->($header), [ map { $cells->($_) } @rows ]);
}

# Run a step's query and compare what psql prints with the page's output:
# the same columns, as many rows, the same cells but in the columns that
# differ from run to run.
my %varies = map { $_ => 1 } qw(pid waiting instance lease in_transaction query worker_pid);
# the page shows PostgreSQL 15's wait event; 17 names rlock's (as it says)
my $named_waits = $node->safe_psql('postgres', 'SHOW server_version_num') >= 170000;
sub step_matches
{
	my ($sql, $shown, $what) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-P', 'format=aligned', '-P', 'tuples_only=off', '-P', 'footer=off' ]);
	my ($got_cols, $got_rows) = table($out);
	my ($want_cols, $want_rows) = table($shown);
	my @diff;
	push @diff, "columns (@$got_cols)" if "@$got_cols" ne "@$want_cols";
	push @diff, scalar(@$got_rows) . ' rows' if @$got_rows != @$want_rows;
	for my $r (0 .. $#$want_rows)
	{
		for my $c (0 .. $#$want_cols)
		{
			next if $varies{ $want_cols->[$c] };
			my $got = $got_rows->[$r][$c] // '(none)';
			my $want = $want_rows->[$r][$c];
			$want = 'Rlock'
			  if $named_waits && $want_cols->[$c] eq 'wait_event' && $want eq 'Extension';
			push @diff, "$want_cols->[$c] '$got'" if $got ne $want;
		}
	}
	return is(join(', ', @diff), '', "$what: the output the page shows")
	  || diag("$sql\n$out$err");
}

my @steps = blocks(section('When locks hang'));
my @pairs;
while (my $b = shift @steps)
{
	next unless $b->[0] eq 'sql';
	my $shown = @steps && $steps[0][0] eq '' ? (shift @steps)->[1] : undef;
	push @pairs, [ $b->[1], $shown ];
}
is(scalar @pairs, 6, 'six steps, five with an output');

# a holder idle in its transaction, a waiter behind it
my $h = $node->background_psql('postgres', on_error_stop => 0);
my $h_pid = $h->query_safe('SELECT pg_backend_pid()');
$h->query_until(qr/held/, "BEGIN;\nSELECT rlock_try('stock:1');\n\\echo held\n");
my $w = $node->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($w, "BEGIN; SELECT rlock_lock('stock:1');");
ok(RlockTest::waiting_in_sql($node, 'stock:1'), 'a session waits for stock:1');

my ($waits, $holds, $does, $ends, $force, $status) = @pairs;
step_matches(@$waits, 'step 1, who waits');
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres', "SELECT pid FROM rlock_holder('stock:1')") eq $h_pid;
		}),
	'(the holder announced)');
step_matches(@$holds, 'step 2, who holds it');
step_matches(@$does, 'step 3, what it does');
like($node->safe_psql('postgres', $does->[0]), qr/^$h_pid\|idle in transaction\|/,
	'step 3 finds the holder, idle in its transaction');
(my $terminate = $ends->[0]) =~ s/pg_terminate_backend\(\d+\)/pg_terminate_backend($h_pid)/
  or die 'step 4 names no pid';
is($node->safe_psql('postgres', $terminate), 't', 'step 4 ends the holder');
($out, $err) = RlockTest::collect($w);
is($err, '', 'and the waiter gets the lock');
step_matches(@$force, 'step 5, the lock removed');
$w->query('COMMIT');
like($w->{stderr}, qr/ERROR:  lock "stock:1" was lost before the transaction committed/,
	'its holder (the former waiter) fails at commit as the page says');

$redis->stop;
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres', 'SELECT command_connection, last_error FROM rlock_status()')
			  eq 'down|could not connect: Connection refused';
		}),
	'Redis stopped: rlock_status() says so');
step_matches(@$status, 'the status of the worker');
($rc, $out, $err) = $node->psql('postgres', "BEGIN; SELECT rlock_try('stock:1')");
like($err, qr/ERROR:  could not reach Redis for lock "stock:1"/,
	'and a lock call fails as the page says');
$w->quit;
$h->quit;

done_testing();
