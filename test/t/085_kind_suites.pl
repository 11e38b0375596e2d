# The scope, savepoint and procedure regression suites and the isolation
# specs of the exclusive lock, run again unchanged for the shared and the
# fair kind, against the same expected output:
#
# - a schema per kind holds functions with the exclusive names
#   (rlock_try, rlock_lock, rlock_release, rlock_held and the session
#   forms) bound to the kind's C functions (rlock_try_shared, ...), so
#   that a search_path choosing that schema makes every call of a suite
#   take, wait for, count and release that kind;
# - pg_regress runs sql/scopes, savepoints and procedures in a
#   database whose search_path is the kind's schema;
# - pg_isolation_regress runs the specs with session s1 on the kind and
#   session s2 on its rival: the exclusive lock for a shared holder (a
#   writer waits for a reader), the fair lock for a fair one;
# - before each round a probe shows that the names reach the kind (Redis
#   holds a read lock, rlock_locks names the kind).
use strict;
use warnings;

use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

plan skip_all => 'the suites do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $regress = $ENV{PG_REGRESS};
plan skip_all => 'PG_REGRESS is not set (run through make installcheck)'
  unless $regress && -x $regress;
my $isolation = dirname($regress) . '/../isolation/pg_isolation_regress';
my $top = dirname(dirname(dirname(__FILE__)));

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('kinds', $redis);

# the functions of each kind standing in for the exclusive names
my @names = qw(try lock release held session_try session_lock session_release);
my %suffix = (shared => '_shared', fair => '_fair');
my %signature = (
	try => 'key text, wait interval DEFAULT \'0\', lease interval DEFAULT NULL) RETURNS boolean',
	lock => 'key text, lease interval DEFAULT NULL) RETURNS void',
	release => 'key text) RETURNS boolean',
	held => 'key text) RETURNS integer');

sub schema_sql
{
	my ($kind) = @_;
	my $sql = "CREATE SCHEMA kind_$kind;\n";
	for my $name (@names)
	{
		(my $base = $name) =~ s/^session_//;
		$sql .= "CREATE FUNCTION kind_$kind.rlock_$name($signature{$base}"
		  . " AS '\$libdir/rlock', 'rlock_$name$suffix{$kind}'"
		  . " LANGUAGE C VOLATILE PARALLEL UNSAFE;\n";
	}
	return $sql;
}

# a database as pg_regress makes one, with the extension in public and
# every kind's schema
sub make_database
{
	my ($db, $search_path) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db TEMPLATE template0");
	$node->safe_psql($db, join('',
		"CREATE EXTENSION rlock;\n",
		map({ schema_sql($_) } sort keys %suffix),
		map({ "ALTER DATABASE $db SET $_;\n" } (
			"lc_messages TO 'C'", "lc_monetary TO 'C'", "lc_numeric TO 'C'",
			"lc_time TO 'C'", "bytea_output TO 'hex'",
			"timezone_abbreviations TO 'Default'")),
		$search_path ? "ALTER DATABASE $db SET search_path = $search_path;\n" : ''));
}

# the names reach the kind: a shared probe leaves a read lock in Redis, a
# fair one is listed as fair
sub probe
{
	my ($db, $kind) = @_;
	my $out = $node->safe_psql($db, qq{
		BEGIN;
		SELECT rlock_try('probe:$kind');
		SELECT kind || ' ' || mode FROM public.rlock_locks WHERE key = 'probe:$kind';
		SELECT rlock_held('probe:$kind');
		COMMIT;});
	my $mode = $kind eq 'shared' ? 'shared' : 'exclusive';
	my $k = $kind eq 'shared' ? 'plain' : 'fair';
	is($out, "t\n$k $mode\n1", "in database $db rlock_try takes a $kind lock");
}

sub run_suite
{
	my ($program, $what, $dir, $db, @tests) = @_;
	my $out = "$PostgreSQL::Test::Utils::tmp_check/$db";
	make_path($out);
	my @cmd = ($program, '--use-existing', "--inputdir=$dir", "--outputdir=$out",
		'--host=' . $node->host, '--port=' . $node->port, "--dbname=$db", @tests);
	my $ok = run_log(\@cmd);
	ok($ok, $what);
	if (!$ok && open(my $fh, '<', "$out/regression.diffs"))
	{
		diag(join('', <$fh>));
	}
}

for my $kind (sort keys %suffix)
{
	# pg_regress: the kind everywhere
	my $db = "regress_$kind";
	make_database($db, "kind_$kind, public");
	probe($db, $kind);
	run_suite($regress, "the scope, savepoint, and procedure suites pass with $kind locks",
		$top, $db, qw(scopes savepoints procedures));

	# isolation: s1 on the kind, s2 on its rival
	SKIP:
	{
		skip 'pg_isolation_regress is not installed', 2 unless -x $isolation;
		my $iso = "$PostgreSQL::Test::Utils::tmp_check/specs_$kind";
		make_path("$iso/specs", "$iso/expected");
		my $rival = $kind eq 'shared' ? 'public' : "kind_$kind, public";
		my @specs = qw(blocking wakeup commit_visible abort_release session_xact);
		for my $spec (@specs)
		{
			open(my $in, '<', "$top/specs/$spec.spec") or die "$spec.spec: $!";
			my $text = join('', <$in>);
			close $in;
			my $s1 = ($text =~ s/^session s1\n/session s1\nsetup { SET search_path = kind_$kind, public; }\n/m);
			my $s2 = ($text =~ s/^session s2\n/session s2\nsetup { SET search_path = $rival; }\n/m);
			die "$spec.spec has no sessions s1 and s2" unless $s1 && $s2;
			open(my $out, '>', "$iso/specs/$spec.spec") or die $!;
			print $out $text;
			close $out;
			copy("$top/expected/$spec.out", "$iso/expected/$spec.out") or die $!;
		}
		my $idb = "isolation_$kind";
		make_database($idb, '');
		$node->safe_psql($idb, "ALTER DATABASE $idb SET search_path = kind_$kind, public");
		probe($idb, $kind);
		$node->safe_psql($idb, "ALTER DATABASE $idb RESET search_path");
		run_suite($isolation,
			"the blocking, wake-up, commit, abort and scope specs pass with a $kind holder",
			$iso, $idb, @specs);
	}
}

is(join(' ', sort grep { !/^rlock_instance:/ } @{ $redis->cmd('KEYS', '*') }), '', 'nothing is left in Redis');

done_testing();
