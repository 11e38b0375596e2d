
=pod

=head1 NAME

RlockTest::ACL - the Redis users doc/configuration.md documents for rlock
("Redis ACL"), read from that page, for the tests that run rlock as them

=head1 SYNOPSIS

  my @lines = RlockTest::ACL::lines('data');    # [ rules ], [ rules ], ...
  my @args = RlockTest::ACL::server_args(@lines[0, 1]);  # for redis-server
  my $pw = RlockTest::ACL::password('data');
  $redis->cmd('ACL', 'SETUSER', RlockTest::ACL::user(), @{ $lines[2] });

The lines are never copied into a test: a change of the page that breaks
rlock fails the tests that use them.  With RLOCK_TEST_ACL=1 (the ACL round
of test/harness/run-tests) every server RlockTest::Redis,
RlockTest::Sentinel and RlockTest::Cluster start holds the documented user
(required and optional lines), and RlockTest::node connects as it.

=cut

package RlockTest::ACL;

use strict;
use warnings;

use File::Temp ();

# The headings of doc/configuration.md the lines are under
my %heading = (
	data => 'Standalone, and the data nodes behind Sentinel',
	sentinel => 'The Sentinels',
	cluster => 'Redis Cluster',
	narrow => 'Narrower key patterns',
);

my $parsed;

# Run the whole suite as the documented users (make test sets this for
# its ACL round).
sub everywhere { return ($ENV{RLOCK_TEST_ACL} // '') eq '1' }

# Every "ACL SETUSER" line of a code block of doc/configuration.md, by the
# heading it is under: { heading => [ [ user, rules... ], ... ] }
sub _parse
{
	return $parsed if $parsed;
	my $path = ($ENV{TESTDIR} // '.') . '/doc/configuration.md';
	open(my $fh, '<', $path) or die "cannot read $path: $!";
	my ($under, $fenced) = ('', 0);
	my %by;
	while (my $line = <$fh>)
	{
		chomp $line;
		if ($line =~ /^```/)
		{
			$fenced = !$fenced;
			next;
		}
		if (!$fenced && $line =~ /^#+\s+(.*?)\s*$/)
		{
			$under = $1;
			next;
		}
		push @{ $by{$under} }, [ split ' ', $1 ]
		  if $fenced && $line =~ /^ACL SETUSER\s+(.*)$/;
	}
	close $fh;
	$parsed = \%by;
	return $parsed;
}

# The lines under the heading of $section (data, sentinel, cluster,
# narrow), in the page's order, each a reference to its rules (the words
# after the user name).  data: required, optional, the SELECT addition;
# sentinel: required, optional; cluster: required, optional, the classic
# pub/sub addition; narrow: the narrower patterns.
sub lines
{
	my ($section) = @_;
	my $h = $heading{$section} // die "no ACL section $section";
	my $found = _parse()->{$h}
	  or die "doc/configuration.md has no ACL SETUSER line under \"$h\"";
	my $user = user();
	for (@$found)
	{
		die "doc/configuration.md: an ACL line under \"$h\" is for "
		  . "\"$_->[0]\", not \"$user\""
		  unless $_->[0] eq $user;
	}
	return map { [ @{$_}[ 1 .. $#$_ ] ] } @$found;
}

# The user the lines make (the first line's).
sub user
{
	my $first = _parse()->{ $heading{data} }
	  or die "doc/configuration.md has no ACL SETUSER line under \"$heading{data}\"";
	return $first->[0][0];
}

# The password the first line of $section sets (its ">..." rule).
sub password
{
	my ($section) = @_;
	my ($first) = lines($section);
	my ($pw) = grep { /^>/ } @$first;
	die "the first ACL line for $section sets no password" unless defined $pw;
	return substr($pw, 1);
}

# The commands a set of lines allows, lower case ("client|setname"),
# sorted: their "+" rules.
sub commands
{
	my (@lines) = @_;
	my %c;
	for my $rules (@lines)
	{
		$c{ lc substr($_, 1) } = 1 for grep { /^\+/ } @$rules;
	}
	return sort keys %c;
}

# redis-server arguments that create the user with @lines applied in
# order (one "user" directive: the rules of a second directive for the
# same user would not add to the first).
sub server_args
{
	my (@lines) = @_;
	return ('--user', user(), map { @$_ } @lines);
}

# The same as a line of a configuration file (a Sentinel's).
sub config_line
{
	my (@lines) = @_;
	return join(' ', 'user', user(), map { @$_ } @lines);
}

# Apply @lines to a running server (RlockTest::Redis, or anything with a
# cmd method) in order, as ACL SETUSER would; dies on a refusal.
sub apply
{
	my ($server, @lines) = @_;
	for my $rules (@lines)
	{
		my $r = $server->cmd('ACL', 'SETUSER', user(), @$rules);
		die "ACL SETUSER refused: $r->{error}" if ref $r eq 'HASH';
	}
}

# A 0600 file holding the password of $section's lines; its path.
sub password_file
{
	my ($section) = @_;
	my $dir = File::Temp::tempdir(CLEANUP => 1);
	my $path = "$dir/$section.pw";
	open(my $fh, '>', $path) or die "cannot write $path: $!";
	print $fh password($section), "\n";
	close $fh;
	chmod 0600, $path;
	return $path;
}

# rlock settings that connect as the documented users, to data nodes and
# Sentinels alike; @conf: the node's other settings (the password is the
# one of the Cluster's lines with rlock.topology = cluster).
sub node_conf
{
	my (@conf) = @_;
	my $cluster = grep { /^\s*rlock\.topology\s*=\s*'cluster'/ } @conf;
	return (
		"rlock.username = '" . user() . "'",
		"rlock.password_file = '"
		  . password_file($cluster ? 'cluster' : 'data') . "'",
		"rlock.sentinel_username = '" . user() . "'",
		"rlock.sentinel_password_file = '" . password_file('sentinel') . "'");
}

1;
